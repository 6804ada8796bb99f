package charts_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// TestManagerRunsWithChartRBAC runs the real manager with the flags the chart renders, as the
// chart's ServiceAccount (impersonated), and checks that it does its job with only the
// permissions the chart grants: it generates the self-signed webhook CA into its Secret, wins
// the leader Lease, delivers a Decofile into a ConfigMap with a Ready status and provisions a
// tenant namespace's Valkey ACL user (against a real redis-server).
func TestManagerRunsWithChartRBAC(t *testing.T) {
	c := testenv.APIServer(t)
	// One manager per test process (controller names are process-wide). Decofile and tenant
	// without the mirror, whose read-everything role would hide a missing read permission.
	redis := testenv.Redis(t, servers.RedisOptions{})
	doc := fmt.Sprintf("flags: {controllers: [decofile, tenant], webhook-self-signed: true, valkey-url: 'redis://%s'}", redis.Addr)
	runWithChartRBAC(t, c, doc, func(ctx context.Context) {
		// The tenant part: an opted-in namespace gets its ACL user's Secret.
		tenant := c.Namespace(t, "tenant", map[string]string{decov1.AnnotationValkeyACL: "true"})
		testenv.Eventually(t, 30*time.Second, func() error {
			var s corev1.Secret
			return c.Client.Get(ctx, client.ObjectKey{Namespace: tenant, Name: decov1.ValkeyACLSecretName}, &s)
		})
	})
}

// runWithChartRBAC installs the chart with values doc, runs the manager as its ServiceAccount,
// checks the Decofile part works and then runs more checks.
func runWithChartRBAC(t *testing.T, c *testenv.Cluster, doc string, more func(context.Context)) {
	ns := c.Namespace(t, "siteops", nil)
	m := install(t, c, ns, values(t, doc))
	_, o := parseArgs(t, m.deployment(t))

	// What the pod's environment would decide: its namespace, its ports, its writable folder.
	o.LeaderElectionNamespace = ns
	o.MetricsAddr, o.ProbeAddr = "0", "0"
	o.WebhookHost, o.WebhookPort = "127.0.0.1", freePort(t)
	o.WebhookCertDir = t.TempDir()

	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: fmt.Sprintf("system:serviceaccount:%s:%s-manager", ns, ns),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
	mgr, err := manager.New(cfg, *o)
	if err != nil {
		t.Fatalf("the manager does not start with the chart's permissions: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager stopped with %v", err)
		}
	}()
	select {
	case <-mgr.Elected():
	case err := <-done:
		t.Fatalf("manager stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the manager did not win the leader Lease within 30s")
	}
	var ca corev1.Secret
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ns + "-webhook-ca"}, &ca); err != nil {
		t.Errorf("the self-signed CA Secret named by --webhook-ca-secret: %v", err)
	}

	site := c.Namespace(t, "site", nil)
	d := &decov1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Namespace: site, Name: "shop"},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: &decov1.InlineSource{
			Value: map[string]apiextensionsv1.JSON{"site": {Raw: []byte(`{"name":"shop"}`)}},
		}},
	}
	if err := c.Client.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		select {
		case err := <-done:
			return fmt.Errorf("manager stopped: %w", err)
		default:
		}
		var cm corev1.ConfigMap
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: site, Name: d.ConfigMapName()}, &cm); err != nil {
			return err
		}
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
			return err
		}
		if !meta.IsStatusConditionTrue(d.Status.Conditions, decov1.ConditionReady) {
			return fmt.Errorf("Decofile not Ready: %+v", d.Status.Conditions)
		}
		return nil
	})
	if more != nil {
		more(ctx)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, p, _ := net.SplitHostPort(l.Addr().String())
	n, _ := strconv.Atoi(p)
	return n
}
