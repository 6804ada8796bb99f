package mirror_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/getsops/sops/v3/decrypt"
	"github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/mirror"
	"github.com/siteops/siteops/internal/mirror/engine"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// secretValue is the plaintext the tests look for everywhere it must not be.
const secretValue = "correct-horse-battery-staple"

func secretRule() mirrorv1alpha1.ResourceRule {
	return mirrorv1alpha1.ResourceRule{APIGroups: []string{""}, Resources: []string{"secrets", "configmaps"}}
}

// TestSecretsEncryptedForATenant: a tenant opts its GitTarget in to Secrets (mode Encrypt, an
// age recipient); its Secret lands in git with only data encrypted, `sops -d` with the identity
// gives it back, the plaintext is nowhere in git or Redis, and a restart that replays (cursors
// gone) writes the same ciphertext, so no commit. A target without spec.secrets never writes one.
func TestSecretsEncryptedForATenant(t *testing.T) {
	c := testenv.APIServer(t)
	srv := testenv.Redis(t, servers.RedisOptions{})
	f := newFixture(t, c)
	tenant := c.TenantIn(t, f.ns)
	ctx := context.Background()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("SOPS_AGE_KEY", id.String())
	opts := mirror.Options{RedisAddr: srv.Addr, RedisKeyPrefix: "secrets", SecretHashKeySecret: f.ns + "/mirror-hash-key"}
	eng, stop := runManager(t, c, opts, "")

	// The tenant's own objects: a target that opts in, one that does not, rules, a Secret.
	for _, gt := range []*mirrorv1alpha1.GitTarget{
		{ObjectMeta: metav1.ObjectMeta{Name: "enc", Namespace: f.ns}, Spec: mirrorv1alpha1.GitTargetSpec{ProviderRef: ref(f.provider), Branch: "main", Path: "enc",
			CommitWindow: &metav1.Duration{Duration: 100 * time.Millisecond},
			Secrets:      &mirrorv1alpha1.SecretsPolicy{Mode: mirrorv1alpha1.SecretsEncrypt, Age: &mirrorv1alpha1.AgeEncryption{Recipients: []string{id.Recipient().String()}}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: f.ns}, Spec: mirrorv1alpha1.GitTargetSpec{ProviderRef: ref(f.provider), Branch: "main", Path: "plain",
			CommitWindow: &metav1.Duration{Duration: 100 * time.Millisecond}}},
	} {
		if err := tenant.Client.Create(ctx, gt); err != nil {
			t.Fatal(err)
		}
	}
	for _, target := range []string{"enc", "plain"} {
		if err := tenant.Client.Create(ctx, &mirrorv1alpha1.WatchRule{ObjectMeta: metav1.ObjectMeta{Name: target, Namespace: f.ns},
			Spec: mirrorv1alpha1.WatchRuleSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: target}, Rules: []mirrorv1alpha1.ResourceRule{secretRule()}}}); err != nil {
			t.Fatal(err)
		}
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: f.ns, Labels: map[string]string{"app": "shop"}},
		Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"password": []byte(secretValue)}}
	if err := tenant.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if err := tenant.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "marker", Namespace: f.ns}}); err != nil {
		t.Fatal(err)
	}

	encPath := "enc/" + f.ns + "/core/secrets/db.yaml"
	f.waitFile(t, encPath, "ENC[AES256_GCM")
	f.waitFile(t, "plain/"+f.ns+"/core/configmaps/marker.yaml", "marker")
	f.waitFile(t, "enc/"+f.ns+"/core/configmaps/marker.yaml", "marker")
	file := f.file(encPath)
	for _, readable := range []string{"name: db", "app: shop", "type: Opaque", id.Recipient().String()} {
		if !strings.Contains(file, readable) {
			t.Errorf("the encrypted file does not show %q:\n%s", readable, file)
		}
	}
	back, err := decrypt.Data([]byte(file+"\n"), "yaml")
	if err != nil {
		t.Fatalf("sops decrypt with the tenant's identity: %v", err)
	}
	var decoded map[string]any
	if err := yaml.Unmarshal(back, &decoded); err != nil {
		t.Fatal(err)
	}
	data, _ := decoded["data"].(map[string]any)
	if want := map[string]any{"password": "Y29ycmVjdC1ob3JzZS1iYXR0ZXJ5LXN0YXBsZQ=="}; !reflect.DeepEqual(data, want) {
		t.Fatalf("decrypted data = %v, want %v\n%s", data, want, back)
	}

	// Mode Never (the default): no Secret is written, and the target counts it as skipped.
	if files := f.files(t, "plain/"+f.ns+"/core/secrets"); len(files) != 0 {
		t.Fatalf("a target without spec.secrets wrote %v", files)
	}
	plain := f.waitCondition(t, "plain", mirrorv1alpha1.ConditionReady, metav1.ConditionTrue, "Mirroring")
	if plain.Status.SkippedSecrets != 1 {
		t.Errorf("plain target skippedSecrets = %d, want 1", plain.Status.SkippedSecrets)
	}
	assertNoPlaintext(t, f, srv.Addr)

	// A restart that replays (its cursors gone) rewrites nothing: same plaintext, same ciphertext.
	waitIdle(t, eng, types.NamespacedName{Namespace: f.ns, Name: "enc"})
	before := f.commits()
	stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	keys, err := rdb.Keys(ctx, "secrets:watch:*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("cursor keys %v, %v", keys, err)
	}
	if err := rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	eng, _ = runManager(t, c, opts, "")
	st := waitStatus(t, eng, types.NamespacedName{Namespace: f.ns, Name: "enc"}, func(st engine.TargetStatus) error {
		if st.Replays["no-cursor"] == 0 || st.Writer.Pending != 0 {
			return fmt.Errorf("replays %v, %d pending writes", st.Replays, st.Writer.Pending)
		}
		return nil
	})
	t.Logf("after the restart: replays %v", st.Replays)
	// A marker change after the replay proves the writer has handled everything before it.
	if err := tenant.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after", Namespace: f.ns}}); err != nil {
		t.Fatal(err)
	}
	f.waitFile(t, "enc/"+f.ns+"/core/configmaps/after.yaml", "after")
	f.waitFile(t, "plain/"+f.ns+"/core/configmaps/after.yaml", "after")
	if got := f.file(encPath); got != file {
		t.Fatalf("the unchanged Secret was re-encrypted after the restart:\nbefore:\n%s\nafter:\n%s", file, got)
	}
	if log := f.git(t, "log", "--format=%B", "main"); strings.Count(log, "secrets/"+f.ns+"/db") != 1 {
		t.Errorf("commits touching the Secret:\n%s", log)
	}
	t.Logf("commits before the restart %d, after %d (two ConfigMap commits expected)", before, f.commits())

	// A changed value is encrypted anew and decrypts to the new value.
	secret.Data["password"] = []byte("new-" + secretValue)
	if err := tenant.Client.Update(ctx, secret); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		out, err := decrypt.Data([]byte(f.file(encPath)+"\n"), "yaml")
		if err != nil {
			return err
		}
		if !strings.Contains(string(out), "bmV3LWNvcnJlY3QtaG9yc2UtYmF0dGVyeS1zdGFwbGU=") {
			return errString("the new value is not in git yet")
		}
		return nil
	})
	assertNoPlaintext(t, f, srv.Addr)
}

// assertNoPlaintext fails if the Secret's value, raw or base64, is anywhere in the repository's
// history or in Redis.
func assertNoPlaintext(t *testing.T, f *fixture, redisAddr string) {
	t.Helper()
	needles := []string{secretValue, "Y29ycmVjdC1ob3JzZS1iYXR0ZXJ5LXN0YXBsZQ"}
	history := f.git(t, "log", "-p", "--all")
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var stored strings.Builder
	for _, k := range keys {
		if v, err := rdb.Get(ctx, k).Result(); err == nil {
			stored.WriteString(k + "=" + v + "\n")
		}
	}
	if !strings.Contains(stored.String(), ":secret:v1:") {
		t.Error("no ciphertext is remembered in Redis")
	}
	for _, n := range needles {
		if strings.Contains(history, n) {
			t.Errorf("git history holds the Secret's value %q", n)
		}
		if strings.Contains(stored.String(), n) {
			t.Errorf("Redis holds the Secret's value %q", n)
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// waitIdle waits until the target's writer holds nothing.
func waitIdle(t *testing.T, eng *engine.Engine, key types.NamespacedName) {
	t.Helper()
	waitStatus(t, eng, key, func(st engine.TargetStatus) error {
		if st.Writer.Pending != 0 {
			return errString("pending writes remain")
		}
		return nil
	})
}

// TestWatchRuleFollowsItsTargetsSecretsMode: a tenant's rule selecting Secrets lists them as
// excluded while its target writes none, and resolves them as soon as the target opts in to
// encrypted Secrets, not at the next resync minutes later.
func TestWatchRuleFollowsItsTargetsSecretsMode(t *testing.T) {
	c := testenv.APIServer(t)
	srv := testenv.Redis(t, servers.RedisOptions{})
	f := newFixture(t, c)
	tenant := c.TenantIn(t, f.ns)
	ctx := context.Background()
	runManager(t, c, mirror.Options{RedisAddr: srv.Addr, RedisKeyPrefix: "secretsmode", SecretHashKeySecret: f.ns + "/mirror-hash-key"}, "")

	gt := &mirrorv1alpha1.GitTarget{ObjectMeta: metav1.ObjectMeta{Name: "later", Namespace: f.ns},
		Spec: mirrorv1alpha1.GitTargetSpec{ProviderRef: ref(f.provider), Branch: "main", Path: "later"}}
	if err := tenant.Client.Create(ctx, gt); err != nil {
		t.Fatal(err)
	}
	rule := &mirrorv1alpha1.WatchRule{ObjectMeta: metav1.ObjectMeta{Name: "later", Namespace: f.ns},
		Spec: mirrorv1alpha1.WatchRuleSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "later"}, Rules: []mirrorv1alpha1.ResourceRule{secretRule()}}}
	if err := tenant.Client.Create(ctx, rule); err != nil {
		t.Fatal(err)
	}
	resolved := func(wantSecrets bool) func() error {
		return func() error {
			var got mirrorv1alpha1.WatchRule
			if err := tenant.Client.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: "later"}, &got); err != nil {
				return err
			}
			hasSecrets := strings.Contains(strings.Join(got.Status.Resources, ","), "secrets")
			excluded := len(got.Status.Excluded) > 0 && got.Status.Excluded[0].Resource == "secrets"
			if hasSecrets != wantSecrets || excluded == wantSecrets {
				return fmt.Errorf("resources %v, excluded %v; want secrets resolved: %v", got.Status.Resources, got.Status.Excluded, wantSecrets)
			}
			return nil
		}
	}
	testenv.Eventually(t, 30*time.Second, resolved(false))

	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	before := gt.DeepCopy()
	gt.Spec.Secrets = &mirrorv1alpha1.SecretsPolicy{Mode: mirrorv1alpha1.SecretsEncrypt, Age: &mirrorv1alpha1.AgeEncryption{Recipients: []string{id.Recipient().String()}}}
	if err := tenant.Client.Patch(ctx, gt, client.MergeFrom(before)); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, resolved(true))
}
