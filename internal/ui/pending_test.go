package ui_test

import (
	"context"
	"fmt"
	"html"
	"net"
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

// TestGitTargetPageShowsPendingChanges runs the manager with the mirror part (author attribution
// from the API server's audit events) and the UI. While the git remote refuses every request, a
// ConfigMap alice creates cannot be pushed: the GitTarget's page, read through the
// authenticating proxy, lists it under its pending changes (the file, write, the object, alice
// as the author the commit will name, exact_user). Once the remote serves again and the change
// is pushed, the page no longer lists it.
func TestGitTargetPageShowsPendingChanges(t *testing.T) {
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
	url, err := remote.CreateRepo("ui-pending", "main")
	if err != nil {
		t.Fatal(err)
	}
	bare := remote.RepoDir("ui-pending")
	e := startUIOn(t, c, func(o *manager.Options) {
		o.Controllers = []string{manager.PartMirror}
		o.Mirror.RedisAddr = redis.Addr
		o.Mirror.CommitRequestWebhook, o.Mirror.WatchRuleWebhook = false, false
		o.Mirror.GitAllowedSchemes, o.Mirror.GitAllowedHosts = []string{"https", "http"}, []string{"127.0.0.0/8"}
		o.Mirror.Attribution = attribution.Options{Enabled: true, Grace: 4 * time.Second, FactTTL: time.Minute, Route: "ui",
			ListenAddress: auditAddr, CertDir: auditCerts.CertDir, ClientCAFile: auditCerts.CAFile, ClientNames: []string{"kube-apiserver"}}
	})

	ctx := t.Context()
	ns := c.Namespace(t, "ui-pending", nil)
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
	t.Cleanup(func() {
		_ = c.Client.Delete(context.Background(), &mirrorv1.GitTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "main"}})
	})
	base := e.proxy(t, "platform-admin", "system:masters")
	pagePath := "/namespaces/" + ns + "/gittargets/main"
	dir := "clusters/dev/" + ns + "/core/configmaps/"

	// The writer opened the remote and pushed the first object: nothing is pending.
	waitGitFile(t, bare, dir+"sentinel.yaml")
	testenv.Eventually(t, 30*time.Second, func() error {
		if rows := pendingRows(fetchPage(t, base+pagePath)); len(rows) != 1 || !strings.Contains(rows[0], `class="empty"`) {
			return fmt.Errorf("the pending changes are not empty yet: %q", rows)
		}
		return nil
	})

	remote.SetFault(&servers.GitFault{Refuse: true})
	alice := c.UserClient(t, "alice", "system:masters")
	if err := alice.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}, Data: map[string]string{"color": "blue"}}); err != nil {
		t.Fatal(err)
	}
	file := dir + "app.yaml"
	var row string
	testenv.Eventually(t, 30*time.Second, func() error {
		row = ""
		for _, r := range pendingRows(fetchPage(t, base+pagePath)) {
			if strings.Contains(r, "<code>"+file+"</code>") {
				row = r
			}
		}
		if row == "" {
			return fmt.Errorf("the page does not list %s as pending", file)
		}
		return nil
	})
	for _, want := range []string{">write<", ">ConfigMap " + ns + "/app<", html.EscapeString("alice <alice@users.noreply.invalid>"), ">exact_user<", "s ago<"} {
		if !strings.Contains(row, want) {
			t.Errorf("the pending change's row lacks %q:\n%s", want, row)
		}
	}
	if exec.Command("git", "--git-dir", bare, "cat-file", "-e", "main:"+file).Run() == nil {
		t.Fatalf("%s is on main while the remote refuses pushes", file)
	}

	remote.SetFault(nil)
	waitGitFile(t, bare, file)
	testenv.Eventually(t, 30*time.Second, func() error {
		for _, r := range pendingRows(fetchPage(t, base+pagePath)) {
			if strings.Contains(r, file) {
				return fmt.Errorf("the page still lists the pushed %s as pending", file)
			}
		}
		return nil
	})
}

// pendingRows are the body rows of the page's pending changes table.
func pendingRows(page string) []string {
	start := strings.Index(page, `<table class="pending">`)
	if start < 0 {
		return nil
	}
	table := page[start:]
	table = table[:strings.Index(table, "</table>")]
	body := table[strings.Index(table, "<tbody>")+len("<tbody>"):]
	return strings.Split(body, "<tr>")[1:]
}
