package mirror_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/siteops/siteops/internal/mirror"
	"github.com/siteops/siteops/internal/mirror/attribution"
	"github.com/siteops/siteops/internal/mirror/audit"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// TestManagerAttributesCommits runs the whole mirror part with --author-attribution: the manager
// serves the audit receiver over mTLS, the API server (own instance, audit webhook configured)
// posts to it, and every commit names the user who made the change.
// configMapAuditPolicy logs writes to ConfigMaps with their responses, and nothing else.
const configMapAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: RequestResponse
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
  resources: [{group: "", resources: ["configmaps"]}]
- level: None
`

func TestManagerAttributesCommits(t *testing.T) {
	ip := testenv.LoopbackIP()
	port, err := servers.FreePort(ip)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(ip, strconv.Itoa(port))
	certs := testenv.NewMTLS(t, "kube-apiserver", ip)
	aw, err := servers.WriteAuditWebhook(t.TempDir(), "https://"+addr+audit.PathPrefix+"prod", certs.MTLS, configMapAuditPolicy)
	if err != nil {
		t.Fatal(err)
	}
	c := testenv.NewAPIServer(t, servers.APIServerOptions{Configure: aw.Configure})
	redis := testenv.Redis(t, servers.RedisOptions{})
	f := newFixture(t, c)
	runManager(t, c, mirror.Options{RedisAddr: redis.Addr, RedisKeyPrefix: "attr", Attribution: attribution.Options{
		Enabled: true, Grace: 4 * time.Second, FactTTL: time.Minute, Route: "prod",
		ListenAddress: addr, CertDir: certs.CertDir, ClientCAFile: certs.CAFile, ClientNames: []string{"kube-apiserver"},
	}}, "")
	f.target(t, "main", "clusters/dev", 0, "")
	f.watchRule(t, "cms", "main", cmRule())
	base := "clusters/dev/" + f.ns + "/core/configmaps/"
	f.create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "sentinel", Namespace: f.ns}})
	f.waitFile(t, base+"sentinel.yaml", "sentinel")

	ctx := context.Background()
	user := func(name string) client.Client {
		u, err := c.Env.AddUser(envtest.User{Name: name, Groups: []string{"system:masters"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := client.New(u.Config(), client.Options{Scheme: c.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	alice, bob := user("alice"), user("bob")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns}, Data: map[string]string{"color": "blue"}}
	if err := alice.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	f.waitFile(t, base+"app.yaml", "blue")
	cm.Data["color"] = "green"
	if err := bob.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	f.waitFile(t, base+"app.yaml", "green")
	if err := alice.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	f.waitNoFile(t, base+"app.yaml")

	log := f.git(t, "log", "--format=%an <%ae> | %cn | %s", "main")
	ref := "v1/configmaps/" + f.ns + "/app"
	for _, want := range []string{
		"alice <alice@users.noreply.invalid> | Mirror Bot | [CREATE] " + ref,
		"bob <bob@users.noreply.invalid> | Mirror Bot | [UPDATE] " + ref,
		"alice <alice@users.noreply.invalid> | Mirror Bot | [DELETE] " + ref,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("history lacks %q:\n%s", want, log)
		}
	}
}
