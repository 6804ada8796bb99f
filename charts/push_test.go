package charts_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/decofile/push"
	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/testenv"
)

// TestPushWebhook: with a push bind address, the manager declares the push port, gets its
// secret from the named Secret, a Service and (when asked) an Ingress reach exactly /hooks/push,
// and the NetworkPolicy opens the port; off by default. The GitHub App key is mounted and its
// flag points at it.
func TestPushWebhook(t *testing.T) {
	m := render(t, "siteops", namespace, values(t, `
flags:
  push-webhook-bind-address: ":9445"
  github-app-id: 12345
secrets:
  pushWebhookSecret: {name: hooks, key: secret}
  githubAppPrivateKey: {name: gh-app}
pushWebhook:
  ingress: {enabled: true, className: nginx, host: hooks.example.com}
`))
	d := m.deployment(t)
	if p := containerPort(d, "push"); p != 9445 {
		t.Fatalf("push container port = %d, want 9445", p)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "PUSH_WEBHOOK_SECRET" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef.Name == "hooks" && e.ValueFrom.SecretKeyRef.Key == "secret"
	}) {
		t.Fatalf("PUSH_WEBHOOK_SECRET not from Secret hooks: %+v", c.Env)
	}
	if !slices.Contains(c.Args, "--github-app-private-key-file=/etc/siteops/github-app/private-key.pem") || !slices.Contains(c.Args, "--github-app-id=12345") {
		t.Fatalf("GitHub App flags: %q", c.Args)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(v corev1.VolumeMount) bool { return v.MountPath == "/etc/siteops/github-app" && v.ReadOnly }) ||
		!slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "gh-app" }) {
		t.Fatal("the GitHub App key Secret is not mounted read-only")
	}
	var svc corev1.Service
	if !m.get(t, "Service", "siteops-push", &svc) || !selects(svc.Spec.Selector, d.Spec.Template.Labels) || svc.Spec.Ports[0].TargetPort.String() != "push" {
		t.Fatalf("push Service missing or not reaching the push port: %+v", svc.Spec)
	}
	var ing networkingv1.Ingress
	if !m.get(t, "Ingress", "siteops-push", &ing) {
		t.Fatal("no push Ingress")
	}
	r := ing.Spec.Rules[0]
	if r.Host != "hooks.example.com" || len(r.HTTP.Paths) != 1 || r.HTTP.Paths[0].Path != "/hooks/push" || *r.HTTP.Paths[0].PathType != networkingv1.PathTypeExact ||
		r.HTTP.Paths[0].Backend.Service.Name != "siteops-push" {
		t.Fatalf("Ingress exposes more than the push path: %+v", r)
	}
	var np networkingv1.NetworkPolicy
	if !m.get(t, "NetworkPolicy", "siteops-manager", &np) || !slices.ContainsFunc(np.Spec.Ingress, func(r networkingv1.NetworkPolicyIngressRule) bool {
		return len(r.Ports) == 1 && r.Ports[0].Port.String() == "push"
	}) {
		t.Fatalf("the NetworkPolicy does not open the push port: %+v", np.Spec.Ingress)
	}

	off := render(t, "siteops", namespace, values(t, "{}"))
	if off.get(t, "Service", "siteops-push", nil) || off.get(t, "Ingress", "siteops-push", nil) || containerPort(off.deployment(t), "push") != -1 {
		t.Error("push events are off by default, yet a push Service, Ingress or port is rendered")
	}
	for _, a := range off.deployment(t).Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--github-app-private-key-file") && a != "--github-app-private-key-file=" {
			t.Errorf("no app key configured, yet %s", a)
		}
	}
}

// TestPushReplayCacheWithChartRBAC runs two managers (two replicas) with the flags the chart
// renders for push events, as the chart's ServiceAccount, with the leader election Lease in
// another namespace: a delivery one replica acted on is a replay for the other, kept in a Lease
// of the release namespace that the chart's push-replays Role alone lets it write. Leases of
// other namespaces stay out of reach, and the sweep works with the same permissions.
func TestPushReplayCacheWithChartRBAC(t *testing.T) {
	off := render(t, "siteops", namespace, values(t, "{}"))
	if off.get(t, "Role", "siteops-push-replays", nil) {
		t.Error("push events are off, yet the push-replays Role is rendered")
	}

	c := testenv.APIServer(t)
	ns := c.Namespace(t, "siteops", nil)
	elsewhere := c.Namespace(t, "leader", nil)
	m := install(t, c, ns, values(t, fmt.Sprintf(`
flags:
  controllers: [decofile]
  decofile-disable-injection: true
  push-webhook-bind-address: ":9445"
  leader-election-namespace: %s
secrets:
  pushWebhookSecret: {name: hooks, key: secret}
`, elsewhere)))
	var role rbacv1.Role
	if !m.get(t, "Role", ns+"-push-replays", &role) || role.Namespace != ns {
		t.Fatalf("no push-replays Role in the release namespace: %+v", role.ObjectMeta)
	}
	_, o := parseArgs(t, m.deployment(t))
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte("chart-push-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// What the pod's environment would decide: its namespace (the chart's POD_NAMESPACE), its
	// ports, the mounted secret.
	t.Setenv("POD_NAMESPACE", ns)
	cfg := rest.CopyConfig(c.Config)
	user := fmt.Sprintf("system:serviceaccount:%s:%s-manager", ns, ns)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}}
	var urls []string
	for i := range 2 {
		r := *o
		r.MetricsAddr, r.ProbeAddr = "0", "0"
		r.WebhookHost, r.WebhookPort, r.WebhookCertDir = "127.0.0.1", freePort(t), t.TempDir()
		r.SecondInProcess = true
		addr := testenv.FreeLoopbackAddr(t)
		r.Decofile.Push.BindAddress, r.Decofile.Push.SecretFile = addr, secretFile
		mgr, err := manager.New(cfg, r)
		if err != nil {
			t.Fatalf("replica %d does not start with the chart's permissions: %v", i, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- mgr.Start(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("replica %d stopped with %v", i, err)
			}
		})
		urls = append(urls, "http://"+addr+push.Path)
	}

	body := []byte(`{"ref":"refs/heads/main","repository":{"full_name":"acme/shop","clone_url":"https://git.example/acme/shop.git"}}`)
	send := func(url string) (int, error) {
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("X-GitHub-Event", "push")
		req.Header.Set("X-GitHub-Delivery", "chart-delivery-1")
		req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(push.Sign(body, []byte("chart-push-secret"))))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	// The receivers listen once their managers run (a GET is answered 405).
	for _, u := range urls {
		testenv.Eventually(t, 30*time.Second, func() error {
			resp, err := http.Get(u)
			if err != nil {
				return err
			}
			resp.Body.Close()
			return nil
		})
	}
	if code, err := send(urls[0]); err != nil || code != http.StatusAccepted {
		t.Fatalf("delivery to replica 0: HTTP %d %v, want 202", code, err)
	}
	if code, err := send(urls[1]); err != nil || code != http.StatusOK {
		t.Fatalf("the same delivery to replica 1: HTTP %d %v, want 200 (already handled)", code, err)
	}
	var leases coordinationv1.LeaseList
	if err := c.Client.List(context.Background(), &leases, client.InNamespace(ns), client.HasLabels{push.LabelReplay}); err != nil || len(leases.Items) != 2 {
		t.Fatalf("replay Leases in the release namespace: %d, %v; want 2", len(leases.Items), err)
	}

	// The sweep, as the ServiceAccount, an hour and more later: lists and deletes them.
	sa, err := client.New(cfg, client.Options{Scheme: c.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	later := func() time.Time { return time.Now().Add(2 * time.Hour) }
	rcv, err := push.NewReceiver(push.Config{Secret: []byte("x"), Trigger: noTrigger{}, Client: sa, Namespace: ns, Now: later})
	if err != nil {
		t.Fatal(err)
	}
	if left, err := rcv.Sweeper().Sweep(context.Background()); err != nil || left != 0 {
		t.Fatalf("sweep as the ServiceAccount: %d left, %v", left, err)
	}
	for _, other := range []string{"default", "kube-system"} {
		a := authorizationv1.ResourceAttributes{Namespace: other, Verb: "create", Group: "coordination.k8s.io", Resource: "leases"}
		if allowed(t, c, user, a) {
			t.Errorf("the manager may create Leases in %s", other)
		}
	}
}

type noTrigger struct{}

func (noTrigger) Trigger(context.Context, []string) (int, error) { return 0, nil }
