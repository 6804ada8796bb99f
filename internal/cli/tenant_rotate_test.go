package cli

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/tenant"
	"github.com/siteops/siteops/internal/tenant/metrics"
	"github.com/siteops/siteops/internal/testenv"
)

// TestTenantRotateRevokeNow: the platform learns that a tenant's password leaked. `siteops tenant
// rotate` alone keeps the old password valid while the tenant's Deployment (which never rolls
// out here) runs old pods; `--revoke-now` makes every node refuse it at once, well within the
// default one-hour grace, and the new password works.
func TestTenantRotateRevokeNow(t *testing.T) {
	const adminPassword = "admin-secret"
	c := testenv.APIServer(t)
	r := testenv.Redis(t, servers.RedisOptions{Password: adminPassword})
	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{
		Scheme: c.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	// No RotationMaxGrace: the manager's default of one hour.
	o := tenant.Options{URL: "redis://" + r.Addr, AdminPassword: adminPassword, ResyncPeriod: time.Hour, DeleteTimeout: time.Minute, RolloutPoll: 200 * time.Millisecond}
	if err := tenant.Setup(mgr, o); err != nil {
		t.Fatal(err)
	}
	testenv.StartManager(t, mgr)
	ctx := context.Background()
	kc := c.KubeConfigFile(t, t.TempDir())
	run := func(args ...string) (string, error) {
		var out bytes.Buffer
		cmd := NewRootCommand()
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"tenant", "rotate", "--kubeconfig", kc}, args...))
		err := cmd.ExecuteContext(ctx)
		return out.String(), err
	}
	authOK := func(user, pass string) error {
		rc := redis.NewClient(&redis.Options{Addr: r.Addr, Username: user, Password: pass, MaxRetries: -1, Protocol: 2})
		defer rc.Close()
		return rc.Ping(ctx).Err()
	}
	password := func(ns, not string) (user, pass string) {
		testenv.Eventually(t, 20*time.Second, func() error {
			var s corev1.Secret
			if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: decov1.ValkeyACLSecretName}, &s); err != nil {
				return err
			}
			user, pass = string(s.Data[decov1.ValkeyACLUsernameKey]), string(s.Data[decov1.ValkeyACLPasswordKey])
			if pass == "" || pass == not {
				return fmt.Errorf("no new password in the Secret yet")
			}
			return authOK(user, pass)
		})
		return user, pass
	}

	tn := c.Tenant(t, "sites-leak", map[string]string{decov1.AnnotationValkeyACL: "true"})
	user, p1 := password(tn.Namespace, "")
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: tn.Namespace, Name: "site", Annotations: map[string]string{decov1.AnnotationValkeyACLInject: "true"}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "site"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "site"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "site"}}},
			},
		},
	}
	if err := tn.Client.Create(ctx, dep); err != nil { // the tenant's own workload; it never rolls out
		t.Fatalf("tenant creates a Deployment: %v", err)
	}

	if out, err := run(tn.Namespace); err != nil || !strings.Contains(out, "namespace/"+tn.Namespace+" rotation requested") {
		t.Fatalf("tenant rotate: %v\n%s", err, out)
	}
	_, p2 := password(tn.Namespace, p1)
	time.Sleep(time.Second) // several rollout polls
	if err := authOK(user, p1); err != nil {
		t.Fatalf("a rotation without --revoke-now refused the old password before the workloads rolled out: %v", err)
	}

	revoked := testutil.ToFloat64(metrics.RotationsCut.WithLabelValues("revoke_now"))
	start := time.Now()
	if out, err := run(tn.Namespace, "--revoke-now"); err != nil || !strings.Contains(out, "revoked at once") {
		t.Fatalf("tenant rotate --revoke-now: %v\n%s", err, out)
	}
	_, p3 := password(tn.Namespace, p2)
	testenv.Eventually(t, 5*time.Second, func() error {
		for _, p := range []string{p1, p2} {
			if err := authOK(user, p); err == nil {
				return fmt.Errorf("an earlier password is still accepted %v after --revoke-now", time.Since(start).Round(100*time.Millisecond))
			}
		}
		return nil
	})
	t.Logf("earlier passwords refused %v after --revoke-now", time.Since(start).Round(10*time.Millisecond))
	if err := authOK(user, p3); err != nil {
		t.Fatalf("the new password does not work: %v", err)
	}
	if d := testutil.ToFloat64(metrics.RotationsCut.WithLabelValues("revoke_now")) - revoked; d != 1 {
		t.Errorf("siteops_tenant_rotations_cut_total{reason=revoke_now} rose by %v, want 1", d)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		var list eventsv1.EventList
		if err := c.Client.List(ctx, &list); err != nil {
			return err
		}
		for _, ev := range list.Items {
			if ev.Regarding.Kind == "Namespace" && ev.Regarding.Name == tn.Namespace && ev.Reason == "ValkeyACLOldPasswordsRevoked" && ev.Type == corev1.EventTypeWarning {
				return nil
			}
		}
		return fmt.Errorf("no ValkeyACLOldPasswordsRevoked Warning on namespace %s", tn.Namespace)
	})

	plain := c.Namespace(t, "plain", nil)
	if _, err := run(plain); err == nil || !strings.Contains(err.Error(), "not annotated") {
		t.Fatalf("rotate of a namespace that does not opt in: %v", err)
	}
	if _, err := run(); err == nil {
		t.Fatal("rotate without a namespace succeeded")
	}
}
