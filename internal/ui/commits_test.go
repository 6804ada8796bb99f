package ui_test

import (
	"bufio"
	"context"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mirrorv1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/mirror/attribution"
	"github.com/siteops/siteops/internal/mirror/audit"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// TestGitTargetPageShowsPushedCommits runs the manager with the mirror part (author attribution
// from the API server's audit events) and the UI: a ConfigMap alice creates is committed and
// pushed, and the GitTarget's page, read through the authenticating proxy, shows that commit
// with alice as its author, how she was found (exact_user) and the change's Audit-ID, above the
// committer's commit of a ConfigMap no audit event named (absent). A page open on the namespace
// hears of the push live.
func TestGitTargetPageShowsPushedCommits(t *testing.T) {
	m := startMirrorUI(t, "ui-commits")
	c, ctx, ns, bare, base, pagePath, dir := m.c, t.Context(), m.ns, m.bare, m.base, m.pagePath, m.dir

	// The first push is on the page before the live stream opens.
	waitGitFile(t, bare, dir+"sentinel.yaml")
	sentinel := bareGit(t, bare, "rev-parse", "main")
	testenv.Eventually(t, 30*time.Second, func() error {
		if body := fetchPage(t, base+pagePath); !strings.Contains(body, sentinel) {
			return fmt.Errorf("the page does not show the first commit %s yet", sentinel)
		}
		return nil
	})
	changes := liveChanges(t, base, ns)
	drainQuiet(changes, 2*time.Second)

	alice := c.UserClient(t, "alice", "system:masters")
	if err := alice.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}, Data: map[string]string{"color": "blue"}}); err != nil {
		t.Fatal(err)
	}
	waitGitFile(t, bare, dir+"app.yaml")
	hash := bareGit(t, bare, "rev-parse", "main")
	author := bareGit(t, bare, "log", "-1", "--format=%an <%ae>", "main")
	auditID := bareGit(t, bare, "log", "-1", "--format=%(trailers:key=Audit-ID,valueonly,unfold)", "main")
	attributed := bareGit(t, bare, "log", "-1", "--format=%(trailers:key=Attribution,valueonly,unfold)", "main")
	if author != "alice <alice@users.noreply.invalid>" || attributed != "exact_user" || auditID == "" {
		t.Fatalf("the commit is authored %q, attribution %q, Audit-ID %q: want alice's, exact_user, an Audit-ID", author, attributed, auditID)
	}
	select {
	case <-changes:
	case <-time.After(30 * time.Second):
		t.Fatal("the open page heard of no change of the namespace after the push")
	}
	// The page the change event makes the browser read again shows the commit.
	body := fetchPage(t, base+pagePath)
	row := commitRow(body, hash)
	if row == "" {
		t.Fatalf("the page does not show the pushed commit %s:\n%s", hash, body)
	}
	for _, want := range []string{html.EscapeString(author), ">exact_user<", auditID, "[CREATE] v1/configmaps/" + ns + "/app", "<td>1</td>"} {
		if !strings.Contains(row, want) {
			t.Errorf("the commit's row lacks %q:\n%s", want, row)
		}
	}
	first := commitRow(body, sentinel)
	for _, want := range []string{html.EscapeString("Mirror Bot <mirror@example.com>"), ">absent<", "<code></code>", "[CREATE] v1/configmaps/" + ns + "/sentinel"} {
		if !strings.Contains(first, want) {
			t.Errorf("the first commit's row lacks %q:\n%s", want, first)
		}
	}
	if strings.Index(body, hash) > strings.Index(body, sentinel) {
		t.Error("the newest commit is not listed first")
	}
}

// bareGit runs git on the bare repository and returns its trimmed output.
func bareGit(t *testing.T, bare string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"--git-dir", bare}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// waitGitFile waits until path is on the repository's main branch.
func waitGitFile(t *testing.T, bare, path string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		if out, err := exec.Command("git", "--git-dir", bare, "cat-file", "-e", "main:"+path).CombinedOutput(); err != nil {
			return fmt.Errorf("%s is not on main: %w: %s", path, err, out)
		}
		return nil
	})
}

// fetchPage reads url and returns its body; any status but 200 fails the test.
func fetchPage(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: HTTP %d:\n%s", url, res.StatusCode, body)
	}
	return string(body)
}

// liveChanges opens the live stream of namespace ns, as a page of it does, and returns a channel
// that receives each change event.
func liveChanges(t *testing.T, base, ns string) <-chan struct{} {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/live?ns="+ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		cancel()
		res.Body.Close()
		t.Fatalf("live stream: HTTP %d", res.StatusCode)
	}
	body := res.Body
	out := make(chan struct{}, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(body)
		for sc.Scan() {
			if sc.Text() == "event: change" {
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() { cancel(); body.Close(); <-done })
	return out
}

// drainQuiet takes the changes already told until none came for d.
func drainQuiet(changes <-chan struct{}, d time.Duration) {
	for {
		select {
		case <-changes:
		case <-time.After(d):
			return
		}
	}
}

// commitRow is the row of the page's commits table that shows hash, or "".
func commitRow(page, hash string) string {
	start := strings.Index(page, `<table class="commits">`)
	if start < 0 {
		return ""
	}
	table := page[start:]
	table = table[:strings.Index(table, "</table>")]
	for _, row := range strings.Split(table, "<tr>") {
		if strings.Contains(row, `<code title="`+hash+`">`) {
			return row
		}
	}
	return ""
}

// mirrorUI is the manager with the mirror part and the UI, as the GitTarget page tests run it:
// its own API server posting audit events to the manager's receiver (author attribution), Redis,
// a git remote, and in namespace ns a GitTarget "main" with a WatchRule on ConfigMaps, and a
// ConfigMap "sentinel" older than the target.
type mirrorUI struct {
	c      *testenv.Cluster
	remote *servers.GitRemote
	// bare is the remote repository's folder; ns the namespace; base the admin's proxy URL;
	// pagePath the target's page; dir the folder of the namespace's ConfigMaps in the repository.
	bare, ns, base, pagePath, dir string
}

// startMirrorUI starts a mirrorUI whose repository and namespace are named from name.
func startMirrorUI(t *testing.T, name string) *mirrorUI {
	t.Helper()
	ip := testenv.LoopbackIP()
	port, err := servers.FreePort(ip)
	if err != nil {
		t.Fatal(err)
	}
	auditAddr := net.JoinHostPort(ip, strconv.Itoa(port))
	auditCerts := testenv.NewMTLS(t, "kube-apiserver", ip)
	aw, err := servers.WriteAuditWebhook(t.TempDir(), "https://"+auditAddr+audit.PathPrefix+"ui", auditCerts.MTLS, testenv.ConfigMapAuditPolicy)
	if err != nil {
		t.Fatal(err)
	}
	c := testenv.NewAPIServer(t, servers.APIServerOptions{Configure: aw.Configure})
	redis := testenv.Redis(t, servers.RedisOptions{})
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{Username: "mirror", Password: "pw"})
	url, err := remote.CreateRepo(name, "main")
	if err != nil {
		t.Fatal(err)
	}
	e := startUIOn(t, c, func(o *manager.Options) {
		o.Controllers = []string{manager.PartMirror}
		o.Mirror.RedisAddr = redis.Addr
		o.Mirror.CommitRequestWebhook, o.Mirror.WatchRuleWebhook = false, false
		// The test's git remote serves plain HTTP on loopback.
		o.Mirror.GitAllowedSchemes, o.Mirror.GitAllowedHosts = []string{"https", "http"}, []string{"127.0.0.0/8"}
		o.Mirror.Attribution = attribution.Options{Enabled: true, Grace: 4 * time.Second, FactTTL: time.Minute, Route: "ui",
			ListenAddress: auditAddr, CertDir: auditCerts.CertDir, ClientCAFile: auditCerts.CAFile, ClientNames: []string{"kube-apiserver"}}
	})
	ctx := t.Context()
	ns := c.Namespace(t, name, nil)
	// A ConfigMap older than the target: the first watch lists it, and no audit event is looked
	// for, so its commit is the committer's.
	if err := c.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sentinel"}}); err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "git-auth"}, StringData: map[string]string{"username": "mirror", "password": "pw"}},
		&mirrorv1.GitProvider{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "git"},
			Spec: mirrorv1.GitProviderSpec{URL: url, SecretRef: &corev1.LocalObjectReference{Name: "git-auth"}, AllowedBranches: []string{"main"},
				Committer: mirrorv1.Committer{Name: "Mirror Bot", Email: "mirror@example.com"}}},
		&mirrorv1.GitTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "main"},
			Spec: mirrorv1.GitTargetSpec{ProviderRef: corev1.LocalObjectReference{Name: "git"}, Branch: "main", Path: "clusters/dev",
				CommitWindow: &metav1.Duration{}}},
		&mirrorv1.WatchRule{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cms"},
			Spec: mirrorv1.WatchRuleSpec{TargetRef: mirrorv1.TargetReference{Name: "main"},
				Rules: []mirrorv1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}}}}},
	} {
		if err := c.Client.Create(ctx, o); err != nil {
			t.Fatalf("create %T %s: %v", o, o.GetName(), err)
		}
	}
	// The objects of a namespace stay after the test (no namespace controller): a later manager
	// would mirror them on.
	t.Cleanup(func() {
		_ = c.Client.Delete(context.Background(), &mirrorv1.GitTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "main"}})
	})
	return &mirrorUI{c: c, remote: remote, bare: remote.RepoDir(name), ns: ns, base: e.proxy(t, "platform-admin", "system:masters"),
		pagePath: "/namespaces/" + ns + "/gittargets/main", dir: "clusters/dev/" + ns + "/core/configmaps/"}
}
