// Package secretcrypt encrypts the Secrets a GitTarget mirrors with SOPS (age recipients), so
// only their data is hidden and `sops -d` with a matching age identity gives back the Secret.
//
// SOPS output is different on every run (a fresh data key, fresh IVs, a timestamp), so an
// unchanged Secret would make a new diff on every replay. The encrypter therefore remembers,
// per target and file, an HMAC of the plaintext next to the ciphertext it produced, and hands
// the same ciphertext back while the HMAC is unchanged. The HMAC is keyed with a per-target key
// derived from a key kept in a cluster Secret: it is never written to git, and what is kept in
// Redis (the HMAC and the ciphertext) does not help anyone guess a short value.
package secretcrypt

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/getsops/sops/v3"
	"github.com/getsops/sops/v3/aes"
	sopsage "github.com/getsops/sops/v3/age"
	"github.com/getsops/sops/v3/config"
	"github.com/getsops/sops/v3/keys"
	sopsyaml "github.com/getsops/sops/v3/stores/yaml"
	"github.com/getsops/sops/v3/version"
)

// EncryptedRegex selects the keys whose values SOPS encrypts: a Secret's data only, so its
// name, namespace, labels and type stay readable in git.
const EncryptedRegex = "^(data|stringData)$"

// Cache keeps the last ciphertext of each file with the HMAC of the plaintext it encrypts (the
// Redis store). Neither value reveals the plaintext.
type Cache interface {
	LookupSecretCiphertext(ctx context.Context, targetUID, path string) (mac, ciphertext []byte, ok bool)
	RecordSecretCiphertext(ctx context.Context, targetUID, path string, mac, ciphertext []byte) error
}

// ParseRecipients checks age recipients (age1… public keys) and returns them sorted, without
// duplicates, so the same set always names the same encryption.
func ParseRecipients(recipients []string) ([]string, error) {
	if len(recipients) == 0 {
		return nil, errors.New("no age recipient: set spec.secrets.age.recipients to at least one age public key (age1…)")
	}
	out := make([]string, 0, len(recipients))
	for _, r := range recipients {
		r = strings.TrimSpace(r)
		if _, err := sopsage.MasterKeyFromRecipient(r); err != nil {
			return nil, fmt.Errorf("age recipient %q is not an age public key (age1…): %w", r, err)
		}
		out = append(out, r)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Encrypter encrypts the Secrets of one GitTarget. It is safe for concurrent use.
type Encrypter struct {
	targetUID  string
	recipients []string
	hashKey    []byte
	cache      Cache

	mu  sync.Mutex
	mem map[string]entry
}

type entry struct{ mac, ciphertext []byte }

// New returns an encrypter for the target with the given recipients (see ParseRecipients) and
// HMAC key (see TargetHashKey). cache may be nil: ciphertexts are then only remembered in
// memory, and a restart re-encrypts every Secret once.
func New(targetUID string, recipients []string, hashKey []byte, cache Cache) *Encrypter {
	return &Encrypter{targetUID: targetUID, recipients: slices.Clone(recipients), hashKey: slices.Clone(hashKey), cache: cache, mem: map[string]entry{}}
}

// Recipients are the age recipients every file is encrypted to.
func (e *Encrypter) Recipients() []string { return slices.Clone(e.recipients) }

// mac is the HMAC of what decides the ciphertext: the recipients, the file and the plaintext.
func (e *Encrypter) mac(path string, plaintext []byte) []byte {
	h := hmac.New(sha256.New, e.hashKey)
	for _, r := range e.recipients {
		h.Write([]byte(r))
		h.Write([]byte{0})
	}
	h.Write([]byte(path))
	h.Write([]byte{0})
	h.Write(plaintext)
	return h.Sum(nil)
}

// Encrypt returns the SOPS file of plaintext (a sanitized Secret's YAML) written at path. The
// same plaintext at the same path gives back the same bytes as long as the ciphertext is
// remembered, so an unchanged Secret makes no diff. Errors never quote the plaintext.
func (e *Encrypter) Encrypt(ctx context.Context, path string, plaintext []byte) ([]byte, error) {
	mac := e.mac(path, plaintext)
	e.mu.Lock()
	cached, ok := e.mem[path]
	e.mu.Unlock()
	if !ok && e.cache != nil {
		if m, c, found := e.cache.LookupSecretCiphertext(ctx, e.targetUID, path); found {
			cached, ok = entry{m, c}, true
		}
	}
	if ok && hmac.Equal(cached.mac, mac) {
		e.remember(path, cached)
		return slices.Clone(cached.ciphertext), nil
	}
	out, err := Encrypt(plaintext, e.recipients)
	if err != nil {
		return nil, err
	}
	fresh := entry{mac, out}
	e.remember(path, fresh)
	if e.cache != nil {
		// Without the record a restart re-encrypts this Secret once (a diff, not a loss).
		_ = e.cache.RecordSecretCiphertext(ctx, e.targetUID, path, mac, out)
	}
	return slices.Clone(out), nil
}

// Forget drops the ciphertext remembered in memory for path, once its Secret is deleted; the
// cache's record expires by itself.
func (e *Encrypter) Forget(path string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.mem, path)
}

// Remembered is how many files' ciphertexts are held in memory.
func (e *Encrypter) Remembered() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.mem)
}

func (e *Encrypter) remember(path string, en entry) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.mem[path] = en
}

// Encrypt encrypts the data and stringData of a YAML document to the age recipients with SOPS,
// as `sops -e --encrypted-regex '^(data|stringData)$' --age …` would.
func Encrypt(plaintext []byte, recipients []string) ([]byte, error) {
	// Two-space indentation, as every other file the mirror writes.
	store := sopsyaml.NewStore(&config.YAMLStoreConfig{Indent: 2})
	branches, err := store.LoadPlainFile(plaintext)
	if err != nil {
		// The parser's message may quote the document: say what failed, not where.
		return nil, errors.New("encrypt Secret: its sanitized YAML could not be read")
	}
	var group sops.KeyGroup
	for _, r := range recipients {
		k, err := sopsage.MasterKeyFromRecipient(r)
		if err != nil {
			return nil, fmt.Errorf("encrypt Secret: age recipient %q: %w", r, err)
		}
		group = append(group, keys.MasterKey(k))
	}
	if len(group) == 0 {
		return nil, errors.New("encrypt Secret: no age recipient")
	}
	tree := sops.Tree{Branches: branches, Metadata: sops.Metadata{
		KeyGroups:      []sops.KeyGroup{group},
		EncryptedRegex: EncryptedRegex,
		Version:        version.Version,
	}}
	dataKey, errs := tree.GenerateDataKey()
	if len(errs) > 0 {
		return nil, fmt.Errorf("encrypt Secret: encrypt the data key to the age recipients: %w", errors.Join(errs...))
	}
	cipher := aes.NewCipher()
	mac, err := tree.Encrypt(dataKey, cipher)
	if err != nil {
		return nil, errors.New("encrypt Secret: SOPS could not encrypt its values")
	}
	tree.Metadata.LastModified = time.Now().UTC()
	tree.Metadata.MessageAuthenticationCode, err = cipher.Encrypt(mac, dataKey, tree.Metadata.LastModified.Format(time.RFC3339))
	if err != nil {
		return nil, fmt.Errorf("encrypt Secret: encrypt the SOPS MAC: %w", err)
	}
	out, err := store.EmitEncryptedFile(tree)
	if err != nil {
		return nil, errors.New("encrypt Secret: SOPS could not write the encrypted file")
	}
	return out, nil
}
