package secretcrypt_test

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"sync"
	"testing"

	"filippo.io/age"
	"github.com/getsops/sops/v3/decrypt"
	"go.yaml.in/yaml/v3"

	"github.com/siteops/siteops/internal/mirror/secretcrypt"
)

const plainSecret = `apiVersion: v1
kind: Secret
metadata:
  name: db
  namespace: shop
data:
  password: aHVudGVyMg==
type: Opaque
`

// identity makes a fresh age key pair and makes it the one `sops -d` (and the decrypt package)
// uses, through SOPS_AGE_KEY.
func identity(t *testing.T) (recipient string) {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SOPS_AGE_KEY", id.String())
	return id.Recipient().String()
}

type memCache struct {
	mu sync.Mutex
	m  map[string][2][]byte
}

func (c *memCache) LookupSecretCiphertext(_ context.Context, uid, path string) ([]byte, []byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[uid+"\x00"+path]
	return e[0], e[1], ok
}

func (c *memCache) RecordSecretCiphertext(_ context.Context, uid, path string, mac, ct []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[uid+"\x00"+path] = [2][]byte{mac, ct}
	return nil
}

func TestEncryptDecryptsBackWithTheIdentity(t *testing.T) {
	r := identity(t)
	out, err := secretcrypt.Encrypt([]byte(plainSecret), []string{r})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out, []byte("aHVudGVyMg==")) || bytes.Contains(out, []byte("hunter2")) {
		t.Fatalf("the encrypted file holds the value in plaintext:\n%s", out)
	}
	for _, readable := range []string{"name: db", "namespace: shop", "type: Opaque", "encrypted_regex: ^(data|stringData)$", r} {
		if !strings.Contains(string(out), readable) {
			t.Errorf("the encrypted file does not show %q:\n%s", readable, out)
		}
	}
	back, err := decrypt.Data(out, "yaml")
	if err != nil {
		t.Fatalf("sops decrypt: %v", err)
	}
	var got, want map[string]any
	if err := yaml.Unmarshal(back, &got); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(plainSecret), &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decrypted:\n%s\nwant:\n%s", back, plainSecret)
	}
}

func TestUnchangedPlaintextKeepsItsCiphertext(t *testing.T) {
	r := identity(t)
	cache := &memCache{m: map[string][2][]byte{}}
	key := secretcrypt.TargetHashKey(bytes.Repeat([]byte{7}, 32), "uid-1")
	ctx := context.Background()
	e := secretcrypt.New("uid-1", []string{r}, key, cache)
	first, err := e.Encrypt(ctx, "p/shop/core/secrets/db.yaml", []byte(plainSecret))
	if err != nil {
		t.Fatal(err)
	}
	again, _ := e.Encrypt(ctx, "p/shop/core/secrets/db.yaml", []byte(plainSecret))
	if !bytes.Equal(first, again) {
		t.Fatal("the same plaintext was encrypted anew")
	}
	// A new process (empty memory) finds the ciphertext in the cache.
	restarted := secretcrypt.New("uid-1", []string{r}, key, cache)
	after, _ := restarted.Encrypt(ctx, "p/shop/core/secrets/db.yaml", []byte(plainSecret))
	if !bytes.Equal(first, after) {
		t.Fatal("after a restart the same plaintext was encrypted anew")
	}
	// A changed value, another recipient set or another hash key encrypts anew.
	changed, _ := restarted.Encrypt(ctx, "p/shop/core/secrets/db.yaml", []byte(strings.Replace(plainSecret, "aHVudGVyMg==", "aHVudGVyMw==", 1)))
	if bytes.Equal(first, changed) {
		t.Fatal("a changed Secret kept its old ciphertext")
	}
	other := identity(t)
	rekeyed, _ := secretcrypt.New("uid-1", []string{r, other}, key, cache).Encrypt(ctx, "p/shop/core/secrets/db.yaml", []byte(plainSecret))
	if bytes.Equal(first, rekeyed) || !strings.Contains(string(rekeyed), other) {
		t.Fatal("a new recipient did not re-encrypt the Secret")
	}
	// The cache never holds the plaintext.
	for _, e := range cache.m {
		if bytes.Contains(e[0], []byte("aHVudGVyMg==")) || bytes.Contains(e[1], []byte("aHVudGVyMg==")) {
			t.Fatal("the cache holds the plaintext value")
		}
	}
}

func TestRecipientsAreChecked(t *testing.T) {
	if _, err := secretcrypt.ParseRecipients([]string{"age1notakey"}); err == nil {
		t.Fatal("a malformed recipient was accepted")
	}
	if _, err := secretcrypt.ParseRecipients(nil); err == nil {
		t.Fatal("no recipients was accepted")
	}
	r := identity(t)
	got, err := secretcrypt.ParseRecipients([]string{r, " " + r})
	if err != nil || len(got) != 1 {
		t.Fatalf("ParseRecipients = %v, %v; want one recipient", got, err)
	}
}
