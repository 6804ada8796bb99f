package mirror_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/mirror"
	"github.com/siteops/siteops/internal/mirror/attribution"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// sshSigningKey returns a fresh OpenSSH ed25519 private key and its authorized_keys line.
func sshSigningKey(t *testing.T) (string, string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "mirror")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(block)), strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))
}

// providerReady waits for a GitProvider's Ready condition to have reason.
func providerReady(t *testing.T, cl client.Client, ns, name, reason string) *metav1.Condition {
	t.Helper()
	var ready *metav1.Condition
	testenv.Eventually(t, 30*time.Second, func() error {
		var p mirrorv1alpha1.GitProvider
		if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &p); err != nil {
			return err
		}
		ready = meta.FindStatusCondition(p.Status.Conditions, mirrorv1alpha1.ConditionReady)
		if ready == nil || ready.Reason != reason || ready.ObservedGeneration != p.Generation {
			return fmt.Errorf("GitProvider %s Ready = %+v, want reason %s", name, ready, reason)
		}
		return nil
	})
	return ready
}

// TestTenantSigningKeyOnlyFromOwnNamespace: a tenant's GitProvider names a signing Secret that
// exists only in another namespace; the key is never used, the provider and its target say
// SigningKeyInvalid and nothing is committed. A field naming another namespace is not even kept.
// A public key in its own Secret is refused without being quoted. With a key of its own, every
// commit is signed (checked by git verify-commit) and carries the provenance trailers.
func TestTenantSigningKeyOnlyFromOwnNamespace(t *testing.T) {
	c := testenv.APIServer(t)
	runManager(t, c, mirror.Options{ClusterName: "e2e-cluster"}, "")
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	repo := testenv.Name(t)
	url, err := remote.CreateRepo(repo, "main")
	if err != nil {
		t.Fatal(err)
	}
	bare := remote.RepoDir(repo)
	ctx := context.Background()

	// Another namespace's perfectly good signing key.
	victimKey, _ := sshSigningKey(t)
	victim := c.Namespace(t, "victim", nil)
	must(t, c.Client.Create(ctx, newSecret(victim, "signing", map[string]string{"signingKey": victimKey})))

	tenant := c.Tenant(t, "signer", nil)
	cl := tenant.Client
	signing := &mirrorv1alpha1.CommitSigning{Format: mirrorv1alpha1.SigningSSH, SecretRef: ref("signing")}
	provider := &mirrorv1alpha1.GitProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "git", Namespace: tenant.Namespace},
		Spec:       mirrorv1alpha1.GitProviderSpec{URL: url, Committer: mirrorv1alpha1.Committer{Name: "Tenant Bot", Email: "bot@tenant.example"}, Signing: signing},
	}
	must(t, cl.Create(ctx, provider))
	must(t, cl.Create(ctx, &mirrorv1alpha1.GitTarget{
		ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: tenant.Namespace},
		Spec:       mirrorv1alpha1.GitTargetSpec{ProviderRef: ref("git"), Branch: "main", Path: "signed", CommitWindow: &metav1.Duration{}},
	}))
	must(t, cl.Create(ctx, &mirrorv1alpha1.WatchRule{
		ObjectMeta: metav1.ObjectMeta{Name: "cms", Namespace: tenant.Namespace},
		Spec:       mirrorv1alpha1.WatchRuleSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "site"}, Rules: []mirrorv1alpha1.ResourceRule{cmRule()}},
	}))
	t.Cleanup(func() {
		_ = cl.DeleteAllOf(ctx, &mirrorv1alpha1.GitTarget{}, client.InNamespace(tenant.Namespace))
		_ = cl.DeleteAllOf(ctx, &mirrorv1alpha1.WatchRule{}, client.InNamespace(tenant.Namespace))
	})
	must(t, cl.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: tenant.Namespace}, Data: map[string]string{"v": "1"}}))

	ready := providerReady(t, cl, tenant.Namespace, "git", "SigningKeyInvalid")
	if !strings.Contains(ready.Message, "Secret signing not found in namespace "+tenant.Namespace) {
		t.Fatalf("GitProvider Ready message = %q", ready.Message)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if r := targetReady(t, cl, tenant.Namespace); r == nil || r.Reason != "SigningKeyInvalid" {
			return fmt.Errorf("GitTarget Ready = %+v, want SigningKeyInvalid", r)
		}
		return nil
	})
	if out, err := exec.Command("git", "--git-dir", bare, "rev-parse", "--verify", "-q", "main").CombinedOutput(); err == nil {
		t.Fatalf("a commit was pushed without the signing key: %s", out)
	}

	// A namespace in the reference is not part of the API: the server drops it.
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "mirror.siteops.dev/v1alpha1", "kind": "GitProvider",
		"metadata": map[string]any{"name": "cross", "namespace": tenant.Namespace},
		"spec": map[string]any{"url": url, "committer": map[string]any{"name": "x", "email": "x@example.com"},
			"signing": map[string]any{"format": "SSH", "secretRef": map[string]any{"name": "signing", "namespace": victim}}},
	}}
	if err := cl.Create(ctx, u); err == nil {
		var p mirrorv1alpha1.GitProvider
		must(t, cl.Get(ctx, types.NamespacedName{Namespace: tenant.Namespace, Name: "cross"}, &p))
		raw, _ := json.Marshal(p.Spec.Signing)
		if strings.Contains(string(raw), victim) {
			t.Fatalf("stored signing reference names another namespace: %s", raw)
		}
		if r := providerReady(t, cl, tenant.Namespace, "cross", "SigningKeyInvalid"); !strings.Contains(r.Message, "not found in namespace "+tenant.Namespace) {
			t.Fatalf("cross provider Ready = %q", r.Message)
		}
	} else if !strings.Contains(err.Error(), "namespace") {
		t.Fatalf("create with a namespaced reference: %v", err)
	}

	// Its own Secret with a public key only: refused, and the message never quotes the key.
	ownKey, ownPub := sshSigningKey(t)
	must(t, cl.Create(ctx, newSecret(tenant.Namespace, "public-only", map[string]string{"signingKey": ownPub})))
	patchSigning(t, cl, tenant.Namespace, "public-only")
	ready = providerReady(t, cl, tenant.Namespace, "git", "SigningKeyInvalid")
	if !strings.Contains(ready.Message, `Secret public-only key "signingKey"`) || strings.Contains(ready.Message, strings.Fields(ownPub)[1][:20]) {
		t.Fatalf("GitProvider Ready message = %q", ready.Message)
	}

	// Its own private key: the provider is ready and every commit is signed.
	must(t, cl.Create(ctx, newSecret(tenant.Namespace, "own-signing", map[string]string{"signingKey": ownKey})))
	patchSigning(t, cl, tenant.Namespace, "own-signing")
	providerReady(t, cl, tenant.Namespace, "git", "CredentialsLoaded")
	file := "signed/" + tenant.Namespace + "/core/configmaps/app.yaml"
	waitBareFile(t, bare, file, "v: \"1\"")
	must(t, cl.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: tenant.Namespace}, Data: map[string]string{"v": "2"}}, client.Merge))
	waitBareFile(t, bare, file, "v: \"2\"")

	allowed := filepath.Join(t.TempDir(), "allowed_signers")
	must(t, os.WriteFile(allowed, []byte(`bot@tenant.example namespaces="git" `+ownPub+"\n"), 0o600))
	commits := strings.Fields(gitIn(t, bare, "rev-list", "main"))
	if len(commits) < 2 {
		t.Fatalf("%d commits, want at least 2", len(commits))
	}
	for _, commit := range commits {
		out, err := exec.Command("git", "-c", "gpg.format=ssh", "-c", "gpg.ssh.allowedSignersFile="+allowed, "--git-dir", bare, "verify-commit", "-v", commit).CombinedOutput()
		if err != nil || !strings.Contains(string(out), `Good "git" signature for bot@tenant.example`) {
			t.Fatalf("git verify-commit %s: %v\n%s", commit, err, out)
		}
		// Without attribution every change is the committer's, stated absent; the cluster is named.
		if tr := gitIn(t, bare, "log", "-1", "--format=%(trailers:only,unfold)", commit); tr != "Attribution: absent\nCluster: e2e-cluster" {
			t.Fatalf("commit %s trailers = %q", commit, tr)
		}
	}
}

func patchSigning(t *testing.T, cl client.Client, ns, secret string) {
	t.Helper()
	var p mirrorv1alpha1.GitProvider
	must(t, cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "git"}, &p))
	p.Spec.Signing.SecretRef.Name = secret
	must(t, cl.Update(context.Background(), &p))
}

func gitIn(t *testing.T, bare string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"--git-dir", bare}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func waitBareFile(t *testing.T, bare, path, contains string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		out, err := exec.Command("git", "--git-dir", bare, "show", "main:"+path).CombinedOutput()
		if err != nil || !strings.Contains(string(out), contains) {
			return fmt.Errorf("%s = %q, want it to contain %q", path, out, contains)
		}
		return nil
	})
}

// auditIDs records the Audit-Id header of every response to a client, by method and path.
type auditIDs struct {
	mu  sync.Mutex
	ids map[string]string
}

func (a *auditIDs) wrap(rt http.RoundTripper) http.RoundTripper {
	return promhttp.RoundTripperFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		if err == nil {
			a.mu.Lock()
			a.ids[r.Method+" "+r.URL.Path] = resp.Header.Get("Audit-Id")
			a.mu.Unlock()
		}
		return resp, err
	})
}

func (a *auditIDs) get(key string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ids[key]
}

// TestCommitsNameAuditEventsAndTheUnattributedAuthor runs the manager with --author-attribution,
// --cluster-name and --unattributed-author against an API server posting its audit events: a
// user's change is committed as that user with the audit ID the API server gave the request
// (its Audit-Id response header), and a change no audit event names (the policy does not log
// ServiceAccounts) is committed as the unattributed author, not as the committer.
func TestCommitsNameAuditEventsAndTheUnattributedAuthor(t *testing.T) {
	rcv := newAuditReceiver(t, "prov")
	c := testenv.NewAPIServer(t, servers.APIServerOptions{Configure: rcv.webhook.Configure})
	redis := testenv.Redis(t, servers.RedisOptions{})
	f := newFixture(t, c)
	runManager(t, c, mirror.Options{RedisAddr: redis.Addr, RedisKeyPrefix: "prov", ClusterName: "prod-eu-1", UnattributedAuthor: "unknown <unknown@example.invalid>",
		Attribution: rcv.options(2 * time.Second)}, "")
	f.target(t, "main", "prov", 0, "")
	f.watchRule(t, "cms", "main", cmRule(), mirrorv1alpha1.ResourceRule{APIGroups: []string{""}, Resources: []string{"serviceaccounts"}})

	// Changes made before a watch runs are replayed, never attributed: wait until both run.
	base := "prov/" + f.ns + "/core/"
	f.create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "sentinel", Namespace: f.ns}})
	f.create(t, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "sentinel", Namespace: f.ns}})
	f.waitFile(t, base+"configmaps/sentinel.yaml", "sentinel")
	f.waitFile(t, base+"serviceaccounts/sentinel.yaml", "sentinel")

	ids := &auditIDs{ids: map[string]string{}}
	cfg := c.UserConfig(t, "alice", "system:masters")
	cfg.Wrap(ids.wrap)
	alice, err := client.New(cfg, client.Options{Scheme: c.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	must(t, alice.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}, Data: map[string]string{"color": "blue"}}))
	createID := ids.get("POST /api/v1/namespaces/" + f.ns + "/configmaps")
	if createID == "" {
		t.Fatal("the API server sent no Audit-Id")
	}
	f.waitFile(t, base+"configmaps/app.yaml", "blue")
	must(t, alice.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "robot", Namespace: f.ns}}))
	f.waitFile(t, base+"serviceaccounts/robot.yaml", "robot")

	commitOf := func(path string) string { return f.git(t, "log", "-1", "--format=%H", "main", "--", path) }
	cm, sa := commitOf(base+"configmaps/app.yaml"), commitOf(base+"serviceaccounts/robot.yaml")
	if got := f.git(t, "log", "-1", "--format=%an <%ae>", cm); got != "alice <alice@users.noreply.invalid>" {
		t.Fatalf("ConfigMap commit author = %q", got)
	}
	if got := parseTrailers(t, f.git(t, "log", "-1", "--format=%B", cm)); got != "Audit-ID: "+createID+"\nAttribution: exact_user\nCluster: prod-eu-1" {
		t.Fatalf("ConfigMap commit trailers = %q (create audit ID %s)", got, createID)
	}
	if got := f.git(t, "log", "-1", "--format=%an <%ae>|%cn", sa); got != "unknown <unknown@example.invalid>|Mirror Bot" {
		t.Fatalf("ServiceAccount commit author|committer = %q", got)
	}
	if got := parseTrailers(t, f.git(t, "log", "-1", "--format=%B", sa)); got != "Attribution: absent\nCluster: prod-eu-1" {
		t.Fatalf("ServiceAccount commit trailers = %q", got)
	}
}

// parseTrailers is what `git interpret-trailers --parse` reads from msg.
func parseTrailers(t *testing.T, msg string) string {
	t.Helper()
	cmd := exec.Command("git", "interpret-trailers", "--parse")
	cmd.Stdin = strings.NewReader(msg + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git interpret-trailers: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestUnattributedAuthorFlag(t *testing.T) {
	for _, tc := range []struct {
		o    mirror.Options
		want string
	}{
		{mirror.Options{UnattributedAuthor: "unknown <unknown@example.invalid>"}, "needs --author-attribution"},
		{mirror.Options{UnattributedAuthor: "unknown", Attribution: attribution.Options{Enabled: true}}, `--unattributed-author: "unknown" is not "Name <email>"`},
		{mirror.Options{UnattributedAuthor: "<unknown@example.invalid>", Attribution: attribution.Options{Enabled: true}}, `is not "Name <email>"`},
	} {
		if err := tc.o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: Validate() = %v, want %q", tc.o.UnattributedAuthor, err, tc.want)
		}
	}
}
