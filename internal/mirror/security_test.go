package mirror_test

import (
	"bytes"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/mirror"
	"github.com/siteops/siteops/internal/mirror/commitrequest"
	"github.com/siteops/siteops/internal/mirror/store"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// gitUser is one account of a hosted git server.
type gitUser struct {
	password string
	push     bool
}

// hostedGit is a real git smart-HTTP remote behind a front that authenticates several users and
// lets only some push, as a hosting service does; it logs who pushed and who was refused.
type hostedGit struct {
	*servers.GitRemote
	base string

	mu      sync.Mutex
	pushed  []string // users whose push (receive-pack POST) was let through
	refused []string // users refused a push
}

func newHostedGit(t *testing.T, users map[string]gitUser) *hostedGit {
	t.Helper()
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	backend, err := url.Parse(remote.BaseURL)
	if err != nil {
		t.Fatal(err)
	}
	h := &hostedGit{GitRemote: remote}
	proxy := httputil.NewSingleHostReverseProxy(backend)
	l := testenv.LoopbackListener(t)
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, pw, ok := r.BasicAuth()
		u, known := users[name]
		if !ok || !known || subtle.ConstantTimeCompare([]byte(pw), []byte(u.password)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		receive := strings.HasSuffix(r.URL.Path, "/git-receive-pack") || r.URL.Query().Get("service") == "git-receive-pack"
		if receive && !u.push {
			h.mu.Lock()
			h.refused = append(h.refused, name)
			h.mu.Unlock()
			http.Error(w, "push not allowed for "+name, http.StatusForbidden)
			return
		}
		if receive && r.Method == http.MethodPost {
			h.mu.Lock()
			h.pushed = append(h.pushed, name)
			h.mu.Unlock()
		}
		proxy.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	h.base = "http://" + l.Addr().String()
	return h
}

func (h *hostedGit) repo(t *testing.T, name string) (string, *fixture) {
	t.Helper()
	if _, err := h.CreateRepo(name, "main"); err != nil {
		t.Fatal(err)
	}
	return h.base + "/" + name + ".git", &fixture{bare: h.RepoDir(name)}
}

func (h *hostedGit) log() (pushed, refused []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.pushed), slices.Clone(h.refused)
}

// mirrorSetup creates, through cl, a GitProvider for url with the given credentials (none when
// user is empty), a GitTarget writing path on main and a WatchRule mirroring ConfigMaps of ns.
func mirrorSetup(t *testing.T, cl client.Client, ns, url, user, password, committer, path string, window time.Duration) {
	t.Helper()
	ctx := context.Background()
	p := &mirrorv1alpha1.GitProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "git", Namespace: ns},
		Spec: mirrorv1alpha1.GitProviderSpec{URL: url,
			Committer: mirrorv1alpha1.Committer{Name: committer, Email: strings.ToLower(strings.ReplaceAll(committer, " ", "-")) + "@example.com"}},
	}
	if user != "" {
		must(t, cl.Create(ctx, newSecret(ns, "git-auth", map[string]string{"username": user, "password": password})))
		p.Spec.SecretRef = refPtr("git-auth")
	}
	must(t, cl.Create(ctx, p))
	must(t, cl.Create(ctx, &mirrorv1alpha1.GitTarget{
		ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: ns},
		Spec:       mirrorv1alpha1.GitTargetSpec{ProviderRef: ref("git"), Branch: "main", Path: path, CommitWindow: &metav1.Duration{Duration: window}},
	}))
	must(t, cl.Create(ctx, &mirrorv1alpha1.WatchRule{
		ObjectMeta: metav1.ObjectMeta{Name: "cms", Namespace: ns},
		Spec:       mirrorv1alpha1.WatchRuleSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "site"}, Rules: []mirrorv1alpha1.ResourceRule{cmRule()}},
	}))
	t.Cleanup(func() {
		bg := context.Background()
		_ = cl.DeleteAllOf(bg, &mirrorv1alpha1.GitTarget{}, client.InNamespace(ns))
		_ = cl.DeleteAllOf(bg, &mirrorv1alpha1.WatchRule{}, client.InNamespace(ns))
		_ = cl.DeleteAllOf(bg, &mirrorv1alpha1.CommitRequest{}, client.InNamespace(ns))
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func targetReady(t *testing.T, cl client.Client, ns string) *metav1.Condition {
	t.Helper()
	var gt mirrorv1alpha1.GitTarget
	if err := cl.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "site"}, &gt); err != nil {
		return nil
	}
	return meta.FindStatusCondition(gt.Status.Conditions, mirrorv1alpha1.ConditionReady)
}

// TestTenantsNeverShareAWriter: a tenant points its own GitProvider (its own, read-only
// credentials) at the repository and branch another namespace mirrors to. Its target gets a
// writer of its own: its objects are never pushed with the other namespace's credentials, and
// the other namespace's pushes never switch to the tenant's credentials or committer.
func TestTenantsNeverShareAWriter(t *testing.T) {
	c := testenv.APIServer(t)
	redis := testenv.Redis(t, servers.RedisOptions{})
	git := newHostedGit(t, map[string]gitUser{"victim-bot": {"victim-pw", true}, "intruder": {"intruder-pw", false}})
	repoURL, repo := git.repo(t, "shared")
	runManager(t, c, mirror.Options{RedisAddr: redis.Addr, RedisKeyPrefix: "sec-writer"}, "")
	ctx := context.Background()

	// The victim namespace, set up by the platform team.
	victimNS := c.Namespace(t, "victim", nil)
	mirrorSetup(t, c.Client, victimNS, repoURL, "victim-bot", "victim-pw", "Victim Bot", "victim", 0)
	must(t, c.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: victimNS}, Data: map[string]string{"v": "1"}}))
	repo.waitFile(t, "victim/"+victimNS+"/core/configmaps/app.yaml", "v: \"1\"")

	// The tenant, acting with its own identity.
	tenant := c.Tenant(t, "intruder", nil)
	mirrorSetup(t, tenant.Client, tenant.Namespace, repoURL, "intruder", "intruder-pw", "Intruder", "loot", 0)
	must(t, tenant.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "payload", Namespace: tenant.Namespace}, Data: map[string]string{"x": "1"}}))
	// Its writer tries with its own credentials, which the host refuses (or, with a shared
	// writer, the payload lands with the victim's).
	testenv.Eventually(t, 30*time.Second, func() error {
		if len(repo.files(t, "loot")) > 0 {
			return nil
		}
		if c := targetReady(t, tenant.Client, tenant.Namespace); c == nil || c.Reason != "PushFailed" {
			return fmt.Errorf("tenant target Ready = %+v, want PushFailed", c)
		}
		return nil
	})
	// The victim keeps mirroring with its own credentials meanwhile.
	must(t, c.Client.Patch(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: victimNS}, Data: map[string]string{"v": "2"}}, client.Merge))
	repo.waitFile(t, "victim/"+victimNS+"/core/configmaps/app.yaml", "v: \"2\"")

	if files := repo.files(t, "loot"); len(files) != 0 {
		t.Fatalf("the tenant's objects were pushed with another namespace's credentials: %v", files)
	}
	if committers := repo.git(t, "log", "--format=%cn", "main"); strings.Contains(committers, "Intruder") {
		t.Fatalf("a commit on the victim's branch names the tenant's committer:\n%s", committers)
	}
	pushed, refused := git.log()
	for _, u := range pushed {
		if u != "victim-bot" {
			t.Fatalf("a push went through as %q: %v", u, pushed)
		}
	}
	if !slices.Contains(refused, "intruder") || slices.Contains(refused, "victim-bot") {
		t.Fatalf("refused pushes %v: want the tenant's writer refused with its own credentials, never the victim's", refused)
	}
}

// TestCommitRequestCannotTakeAnotherTargetsChanges: a tenant's GitTarget writes a parent folder
// of another namespace's target on the same repository and branch (an open push remote); the
// tenant's CommitRequest closes only its own window. The other target's pending change stays
// pending and is never committed with the tenant's message.
func TestCommitRequestCannotTakeAnotherTargetsChanges(t *testing.T) {
	c := testenv.APIServer(t)
	redis := testenv.Redis(t, servers.RedisOptions{})
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	repoURL, err := remote.CreateRepo("mono", "main")
	must(t, err)
	repo := &fixture{bare: remote.RepoDir("mono")}
	eng, _ := runManager(t, c, mirror.Options{RedisAddr: redis.Addr, RedisKeyPrefix: "sec-steal"}, "")
	ctx := context.Background()

	victimNS := c.Namespace(t, "victim", nil)
	mirrorSetup(t, c.Client, victimNS, repoURL, "", "", "Mirror Bot", "sites/victim", time.Hour)
	tenant := c.Tenant(t, "thief", nil)
	mirrorSetup(t, tenant.Client, tenant.Namespace, repoURL, "", "", "Mirror Bot", "sites", time.Hour)
	for _, ns := range []string{victimNS, tenant.Namespace} {
		testenv.Eventually(t, 30*time.Second, func() error {
			if st, ok := eng.Status(types.NamespacedName{Namespace: ns, Name: "site"}); !ok || st.Streams == 0 {
				return fmt.Errorf("target %s not running: %+v", ns, st)
			}
			return nil
		})
	}
	before := repo.commits()
	must(t, c.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "unreleased", Namespace: victimNS}, Data: map[string]string{"secret-plan": "launch"}}))
	testenv.Eventually(t, 30*time.Second, func() error {
		if st, _ := eng.Status(types.NamespacedName{Namespace: victimNS, Name: "site"}); st.Writer.Pending == 0 {
			return fmt.Errorf("the victim's change is not pending yet")
		}
		return nil
	})

	must(t, tenant.Client.Create(ctx, &mirrorv1alpha1.CommitRequest{ObjectMeta: metav1.ObjectMeta{Namespace: tenant.Namespace, Name: "grab"},
		Spec: mirrorv1alpha1.CommitRequestSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "site"}, Message: "stolen release"}}))
	var cr mirrorv1alpha1.CommitRequest
	testenv.Eventually(t, 30*time.Second, func() error {
		must(t, c.Client.Get(ctx, types.NamespacedName{Namespace: tenant.Namespace, Name: "grab"}, &cr))
		if cond := meta.FindStatusCondition(cr.Status.Conditions, mirrorv1alpha1.ConditionCommitted); cond == nil || cond.Status != metav1.ConditionTrue {
			return fmt.Errorf("Committed = %+v", cond)
		}
		return nil
	})
	victimFile := "sites/victim/" + victimNS + "/core/configmaps/unreleased.yaml"
	if got := repo.file(victimFile); got != "" {
		t.Fatalf("the tenant's CommitRequest pushed another target's pending change (commit %s):\n%s", cr.Status.Commit, repo.git(t, "log", "-1", "--format=%an | %s", "main"))
	}
	if c := meta.FindStatusCondition(cr.Status.Conditions, mirrorv1alpha1.ConditionCommitted); c.Reason != mirrorv1alpha1.ReasonNothingPending || repo.commits() != before {
		t.Fatalf("Committed = %+v, %d commits (was %d)", c, repo.commits(), before)
	}
	if st, _ := eng.Status(types.NamespacedName{Namespace: victimNS, Name: "site"}); st.Writer.Pending == 0 {
		t.Fatal("the victim's change left its window")
	}
}

// admissionClient makes a CA with the API server's admission client certificate (common name
// kube-apiserver) and the AdmissionConfiguration with which the API server presents it to the
// webhook at hostPort.
func admissionClient(t *testing.T, hostPort string) (*testenv.MTLS, *servers.AdmissionClient) {
	t.Helper()
	certs := testenv.NewMTLS(t, "kube-apiserver", "127.0.0.1")
	a, err := servers.WriteAdmissionClient(t.TempDir(), certs.MTLS, hostPort)
	must(t, err)
	return certs, a
}

// TestCommitRequestAuthorCannotBeForged: the CommitRequest webhook records the submitter the
// API server authenticated. A tenant's pod calling the webhook port directly with a forged
// AdmissionReview (any user, any UID) is refused unless it holds the API server's client
// certificate, and no later record replaces the first one for a UID.
func TestCommitRequestAuthorCannotBeForged(t *testing.T) {
	port, err := servers.FreePort("127.0.0.1")
	must(t, err)
	hostPort := "127.0.0.1:" + strconv.Itoa(port)
	certs, admission := admissionClient(t, hostPort)
	vwc := commitrequest.WebhookConfiguration(commitrequest.URLClientConfig("https://"+hostPort, nil))
	c := testenv.NewAPIServer(t, servers.APIServerOptions{
		Webhooks: envtest.WebhookInstallOptions{LocalServingHost: "127.0.0.1", LocalServingPort: port,
			ValidatingWebhooks: []*admissionregistrationv1.ValidatingWebhookConfiguration{vwc}},
		Configure: admission.Configure,
	})
	redis := testenv.Redis(t, servers.RedisOptions{})
	runWebhookManager(t, c, mirror.Options{RedisAddr: redis.Addr, RedisKeyPrefix: "forge", CommitRequestWebhook: true,
		CommitRequestWebhookClientCA: certs.CAFile, CommitRequestWebhookClientNames: []string{"kube-apiserver"}})
	st, err := store.NewRedisStore(store.RedisStoreConfig{Addr: redis.Addr, KeyPrefix: "forge"})
	must(t, err)
	t.Cleanup(func() { _ = st.Close() })
	authors := st.CommandAuthorStore()
	ctx := context.Background()

	// The real path: a tenant's CommitRequest, admitted by the API server, which presents its
	// client certificate to the webhook.
	tenant := c.Tenant(t, "forger", nil)
	cr := &mirrorv1alpha1.CommitRequest{ObjectMeta: metav1.ObjectMeta{Namespace: tenant.Namespace, Name: "release"},
		Spec: mirrorv1alpha1.CommitRequestSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "site"}, Message: "Release"}}
	must(t, tenant.Client.Create(ctx, cr))
	t.Cleanup(func() {
		_ = c.Client.DeleteAllOf(context.Background(), &mirrorv1alpha1.CommitRequest{}, client.InNamespace(tenant.Namespace))
	})
	testenv.Eventually(t, 10*time.Second, func() error {
		if a, ok := authors.LookupCommandAuthor(ctx, cr.UID); !ok || a.Author != tenant.Name {
			return fmt.Errorf("recorded submitter = %+v, %v; want %s", a, ok, tenant.Name)
		}
		return nil
	})

	// The forgery: a pod posts an AdmissionReview naming a user of its choice.
	forge := func(tlsCfg *tls.Config, uid types.UID) int {
		t.Helper()
		review := admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
			Request: &admissionv1.AdmissionRequest{
				UID:       "forged-review",
				Kind:      metav1.GroupVersionKind{Group: mirrorv1alpha1.GroupVersion.Group, Version: mirrorv1alpha1.GroupVersion.Version, Kind: "CommitRequest"},
				Resource:  metav1.GroupVersionResource{Group: mirrorv1alpha1.GroupVersion.Group, Version: mirrorv1alpha1.GroupVersion.Version, Resource: "commitrequests"},
				Namespace: tenant.Namespace, Name: "release", Operation: admissionv1.Create,
				UserInfo: authnv1.UserInfo{Username: "platform-admin"},
				Object:   runtime.RawExtension{Raw: []byte(fmt.Sprintf(`{"apiVersion":"mirror.siteops.dev/v1alpha1","kind":"CommitRequest","metadata":{"name":"release","namespace":%q,"uid":%q}}`, tenant.Namespace, uid))},
			},
		}
		body, err := json.Marshal(review)
		must(t, err)
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}, Timeout: 5 * time.Second}
		resp, err := hc.Post("https://"+hostPort+commitrequest.WebhookPath, "application/json", bytes.NewReader(body))
		if err != nil {
			return 0
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	noCert := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the attacker does not check the server
	crt, key := certs.Issue(t, "system:node:worker-1", x509.ExtKeyUsageClientAuth, nil)
	pair, err := tls.X509KeyPair(crt, key)
	must(t, err)
	wrongName := &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{pair}} //nolint:gosec // as above

	if code := forge(noCert, "fresh-uid-1"); code == http.StatusOK {
		t.Errorf("a review without a client certificate was served (status %d)", code)
	}
	if code := forge(wrongName, "fresh-uid-2"); code == http.StatusOK {
		t.Errorf("a review with a client certificate of the CA named system:node:worker-1 was served (status %d)", code)
	}
	for _, uid := range []types.UID{"fresh-uid-1", "fresh-uid-2"} {
		if a, ok := authors.LookupCommandAuthor(ctx, uid); ok {
			t.Errorf("a refused review recorded %+v for %s", a, uid)
		}
	}
	forge(noCert, cr.UID)
	if a, _ := authors.LookupCommandAuthor(ctx, cr.UID); a.Author != tenant.Name {
		t.Fatalf("after a forged review the submitter of the tenant's request is %q, want %q", a.Author, tenant.Name)
	}
}
