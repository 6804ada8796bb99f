package provision_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/tenant"
	"github.com/siteops/siteops/internal/tenant/acl"
	"github.com/siteops/siteops/internal/tenant/metrics"
	"github.com/siteops/siteops/internal/tenant/provision"
	"github.com/siteops/siteops/internal/tenant/rollout"
	"github.com/siteops/siteops/internal/testenv"
)

const adminPassword = "admin-secret"

func TestMain(m *testing.M) {
	testenv.Main(m, servers.APIServerOptions{ExtraCRDs: []*apiextensionsv1.CustomResourceDefinition{knativeServiceCRD()}})
}

// knativeServiceCRD is a schema-less stand-in for Knative Serving's Service CRD.
func knativeServiceCRD() *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "services.serving.knative.dev"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "serving.knative.dev",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "services", Singular: "service", Kind: "Service", ListKind: "ServiceList", ShortNames: []string{"ksvc"}},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptr.To(true),
				}},
			}},
		},
	}
}

// env is a running tenant part against the shared API server and a Valkey deployment.
type env struct {
	c     *testenv.Cluster
	set   *servers.SentinelSet
	nodes []string
}

func startPart(t *testing.T, c *testenv.Cluster, o tenant.Options) {
	t.Helper()
	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{
		Scheme:                 c.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if o.ResyncPeriod == 0 {
		o.ResyncPeriod = time.Hour
	}
	if o.DeleteTimeout == 0 {
		o.DeleteTimeout = time.Minute
	}
	o.RolloutPoll = 200 * time.Millisecond
	o.AdminPassword = adminPassword
	if err := tenant.Setup(mgr, o); err != nil {
		t.Fatal(err)
	}
	testenv.StartManager(t, mgr)
}

func newEnv(t *testing.T) *env { return newEnvWithPeriod(t, 0) }

func newEnvWithPeriod(t *testing.T, period time.Duration) *env {
	t.Helper()
	c := testenv.APIServer(t)
	set := testenv.SentinelSet(t, servers.SentinelSetOptions{Replicas: 1, Password: adminPassword})
	startPart(t, c, tenant.Options{SentinelAddrs: set.SentinelAddrs(), SentinelMaster: set.MasterName, ResyncPeriod: period})
	return &env{c: c, set: set, nodes: []string{set.Master.Addr, set.Replicas[0].Addr}}
}

func (e *env) namespace(t *testing.T, prefix string, annotations map[string]string) string {
	return e.c.Namespace(t, prefix, annotations)
}

func (e *env) annotate(t *testing.T, ns string, kv map[string]*string) {
	t.Helper()
	var obj corev1.Namespace
	if err := e.c.Client.Get(context.Background(), client.ObjectKey{Name: ns}, &obj); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(obj.DeepCopy())
	if obj.Annotations == nil {
		obj.Annotations = map[string]string{}
	}
	for k, v := range kv {
		if v == nil {
			delete(obj.Annotations, k)
		} else {
			obj.Annotations[k] = *v
		}
	}
	if err := e.c.Client.Patch(context.Background(), &obj, patch); err != nil {
		t.Fatal(err)
	}
}

func (e *env) secret(ns string) (*corev1.Secret, error) {
	var s corev1.Secret
	err := e.c.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: decov1.ValkeyACLSecretName}, &s)
	return &s, err
}

// waitSecret waits for the tenant Secret whose password differs from not.
func (e *env) waitSecret(t *testing.T, ns, not string) (user, pass string) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, func() error {
		s, err := e.secret(ns)
		if err != nil {
			return err
		}
		user, pass = string(s.Data[decov1.ValkeyACLUsernameKey]), string(s.Data[decov1.ValkeyACLPasswordKey])
		if pass == "" || pass == not {
			return fmt.Errorf("secret still has the old password")
		}
		return nil
	})
	return user, pass
}

func auth(ctx context.Context, addr, user, pass string) error {
	c := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: pass, MaxRetries: -1, Protocol: 2})
	defer c.Close()
	return c.Ping(ctx).Err()
}

func (e *env) authEverywhere(ctx context.Context, user, pass string) error {
	for _, n := range e.nodes {
		if err := auth(ctx, n, user, pass); err != nil {
			return fmt.Errorf("AUTH %s on %s: %w", user, n, err)
		}
	}
	return nil
}

func (e *env) admin(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, Password: adminPassword, Protocol: 2})
}

func (e *env) userExists(ctx context.Context, addr, user string) (bool, error) {
	c := e.admin(addr)
	defer c.Close()
	err := c.Do(ctx, "acl", "getuser", user).Err()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	return err == nil, err
}

func hasEvent(c *testenv.Cluster, ns, reason string) error {
	var list eventsv1.EventList
	if err := c.Client.List(context.Background(), &list); err != nil {
		return err
	}
	for _, ev := range list.Items {
		if ev.Regarding.Name == ns && ev.Reason == reason {
			return nil
		}
	}
	return fmt.Errorf("no %s event for namespace %s", reason, ns)
}

func injectedDeployment(t *testing.T, c *testenv.Cluster, ns string) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "site", Annotations: map[string]string{decov1.AnnotationValkeyACLInject: "true"}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "site"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "site"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "site"}}},
			},
		},
	}
	if err := c.Client.Create(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	return d
}

func knativeService(t *testing.T, c *testenv.Cluster, ns string) *unstructured.Unstructured {
	t.Helper()
	s := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "serving.knative.dev/v1", "kind": "Service",
		"metadata": map[string]any{"namespace": ns, "name": "web", "annotations": map[string]any{decov1.AnnotationInject: "true"}},
		"spec":     map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"image": "site"}}}}},
	}}
	if err := c.Client.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	return s
}

// templateRevision returns the revision annotation of a workload's pod template.
func templateRevision(c *testenv.Cluster, obj client.Object) (string, error) {
	if err := c.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		return "", err
	}
	switch o := obj.(type) {
	case *appsv1.Deployment:
		return o.Spec.Template.Annotations[rollout.AnnotationRevision], nil
	case *unstructured.Unstructured:
		a, _, _ := unstructured.NestedStringMap(o.Object, "spec", "template", "metadata", "annotations")
		return a[rollout.AnnotationRevision], nil
	}
	return "", fmt.Errorf("unexpected %T", obj)
}

// finishRollout plays the Deployment controller and Knative: it reports every workload as
// rolled out at its current generation.
func finishRollout(t *testing.T, c *testenv.Cluster, d *appsv1.Deployment, ksvc *unstructured.Unstructured) {
	t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
			return err
		}
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1, ReadyReplicas: 1}
		return c.Client.Status().Update(ctx, d)
	})
	if err != nil {
		t.Fatal(err)
	}
	if ksvc == nil {
		return
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(ksvc), ksvc); err != nil {
			return err
		}
		rev := fmt.Sprintf("web-%05d", ksvc.GetGeneration())
		ksvc.Object["status"] = map[string]any{
			"observedGeneration": ksvc.GetGeneration(), "latestCreatedRevisionName": rev, "latestReadyRevisionName": rev,
			"conditions": []any{map[string]any{"type": "Ready", "status": "True"}},
		}
		return c.Client.Status().Update(ctx, ksvc)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// waitRevision waits until every workload's pod template carries the revision of u.
func waitRevision(t *testing.T, c *testenv.Cluster, u acl.User, workloads ...client.Object) {
	t.Helper()
	want := provision.Revision(u)
	testenv.Eventually(t, 10*time.Second, func() error {
		for _, w := range workloads {
			rev, err := templateRevision(c, w)
			if err != nil {
				return err
			}
			if rev != want {
				return fmt.Errorf("%T %s not restarted: revision %q, want %q", w, w.GetName(), rev, want)
			}
		}
		return nil
	})
}

func on() *string { return ptr.To("true") }

func TestProvisionIsolatesTenantsAndRestartsWorkloads(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := e.namespace(t, "sites-shopa", nil)
	dep := injectedDeployment(t, e.c, a)
	ksvc := knativeService(t, e.c, a)
	before := testutil.ToFloat64(metrics.Provisioned)
	e.annotate(t, a, map[string]*string{decov1.AnnotationValkeyACL: on()})
	b := e.namespace(t, "sites-shopb", map[string]string{decov1.AnnotationValkeyACL: "true"})

	userA, passA := e.waitSecret(t, a, "")
	userB, passB := e.waitSecret(t, b, "")
	if userA != strings.TrimPrefix(a, "sites-") || len(passA) != 43 {
		t.Fatalf("Secret of %s: user %q password length %d", a, userA, len(passA))
	}
	testenv.Eventually(t, 10*time.Second, func() error { return e.authEverywhere(ctx, userA, passA) })
	testenv.Eventually(t, 10*time.Second, func() error { return e.authEverywhere(ctx, userB, passB) })
	if got := testutil.ToFloat64(metrics.Provisioned) - before; got < 2 {
		t.Errorf("provisioned counter rose by %v, want 2", got)
	}

	ca := redis.NewClient(&redis.Options{Addr: e.set.Master.Addr, Username: userA, Password: passA})
	defer ca.Close()
	cb := redis.NewClient(&redis.Options{Addr: e.set.Master.Addr, Username: userB, Password: passB})
	defer cb.Close()
	if err := cb.Set(ctx, userB+":secret", "b", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := ca.Set(ctx, userA+":k", "a", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := ca.Get(ctx, userB+":secret").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Errorf("tenant A read tenant B's key: %v", err)
	}
	for _, cmd := range [][]any{{"flushall"}, {"flushdb"}, {"keys", "*"}, {"scan", "0"}, {"config", "get", "maxmemory"}} {
		if err := ca.Do(ctx, cmd...).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Errorf("tenant %v: %v, want NOPERM", cmd, err)
		}
	}

	var ns corev1.Namespace
	if err := e.c.Client.Get(ctx, client.ObjectKey{Name: a}, &ns); err != nil || !slices.Contains(ns.Finalizers, provision.Finalizer) {
		t.Fatalf("finalizer on %s: %v %v", a, ns.Finalizers, err)
	}
	want := provision.Revision(acl.User{Name: userA, Password: passA})
	testenv.Eventually(t, 10*time.Second, func() error {
		for _, w := range []client.Object{dep, ksvc} {
			rev, err := templateRevision(e.c, w)
			if err != nil {
				return err
			}
			if rev != want {
				return fmt.Errorf("%T not restarted: revision %q, want %q", w, rev, want)
			}
		}
		return hasEvent(e.c, a, provision.ReasonProvisioned)
	})
}

func TestSecretLossAndRotationKeepOldPasswordUntilRollout(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ns := e.namespace(t, "sites-rot", nil)
	dep := injectedDeployment(t, e.c, ns)
	ksvc := knativeService(t, e.c, ns)
	e.annotate(t, ns, map[string]*string{decov1.AnnotationValkeyACL: on()})
	user, p1 := e.waitSecret(t, ns, "")
	testenv.Eventually(t, 10*time.Second, func() error { return e.authEverywhere(ctx, user, p1) })
	waitRevision(t, e.c, acl.User{Name: user, Password: p1}, dep, ksvc)
	finishRollout(t, e.c, dep, ksvc)

	// Losing the Secret issues a new password; the old one keeps working for running pods.
	s, _ := e.secret(ns)
	if err := e.c.Client.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	_, p2 := e.waitSecret(t, ns, p1)
	testenv.Eventually(t, 10*time.Second, func() error { return e.authEverywhere(ctx, user, p2) })
	if err := e.authEverywhere(ctx, user, p1); err != nil {
		t.Fatalf("old password refused before the rollout finished: %v", err)
	}
	waitRevision(t, e.c, acl.User{Name: user, Password: p2}, dep, ksvc)
	time.Sleep(time.Second) // several rollout polls: nothing may change while pods are old
	if err := e.authEverywhere(ctx, user, p1); err != nil {
		t.Fatalf("old password refused while the rollout is pending: %v", err)
	}
	finishRollout(t, e.c, dep, ksvc)
	testenv.Eventually(t, 10*time.Second, func() error {
		if err := auth(ctx, e.set.Master.Addr, user, p1); err == nil {
			return fmt.Errorf("old password still valid after the rollout")
		}
		if err := auth(ctx, e.set.Replicas[0].Addr, user, p1); err == nil {
			return fmt.Errorf("old password still valid on the replica after the rollout")
		}
		return nil
	})
	if err := e.authEverywhere(ctx, user, p2); err != nil {
		t.Fatal(err)
	}

	// Rotation on request: the same, started by the annotation.
	e.annotate(t, ns, map[string]*string{decov1.AnnotationValkeyACLRotate: ptr.To("2026-1")})
	_, p3 := e.waitSecret(t, ns, p2)
	testenv.Eventually(t, 10*time.Second, func() error { return e.authEverywhere(ctx, user, p3) })
	if err := e.authEverywhere(ctx, user, p2); err != nil {
		t.Fatalf("previous password refused during rotation: %v", err)
	}
	testenv.Eventually(t, 10*time.Second, func() error { return hasEvent(e.c, ns, provision.ReasonRotated) })
	waitRevision(t, e.c, acl.User{Name: user, Password: p3}, dep, ksvc)
	finishRollout(t, e.c, dep, ksvc)
	testenv.Eventually(t, 10*time.Second, func() error {
		if err := auth(ctx, e.set.Master.Addr, user, p2); err == nil {
			return fmt.Errorf("rotated-out password still valid")
		}
		return hasEvent(e.c, ns, provision.ReasonRotationCompleted)
	})
	// The same rotate value again changes nothing.
	e.annotate(t, ns, map[string]*string{decov1.AnnotationValkeyACLSync: ptr.To("1")})
	time.Sleep(500 * time.Millisecond)
	if _, p := e.waitSecret(t, ns, ""); p != p3 {
		t.Fatal("a resync changed the password")
	}
}

func TestForcedResyncHealsLostUser(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ns := e.namespace(t, "sites-heal", map[string]string{decov1.AnnotationValkeyACL: "true"})
	user, pass := e.waitSecret(t, ns, "")
	testenv.Eventually(t, 10*time.Second, func() error { return e.authEverywhere(ctx, user, pass) })
	healed := testutil.ToFloat64(metrics.SelfHealed)
	r := e.admin(e.set.Replicas[0].Addr)
	defer r.Close()
	if err := r.Do(ctx, "acl", "deluser", user).Err(); err != nil {
		t.Fatal(err)
	}
	e.annotate(t, ns, map[string]*string{decov1.AnnotationValkeyACLSync: ptr.To(fmt.Sprint(time.Now().Unix()))})
	testenv.Eventually(t, 10*time.Second, func() error { return e.authEverywhere(ctx, user, pass) })
	if d := testutil.ToFloat64(metrics.SelfHealed) - healed; d != 1 {
		t.Errorf("self-healed counter rose by %v, want 1", d)
	}
	testenv.Eventually(t, 10*time.Second, func() error { return hasEvent(e.c, ns, provision.ReasonSelfHealed) })
	if _, p := e.waitSecret(t, ns, ""); p != pass {
		t.Fatal("resync changed the password: running pods would be locked out")
	}
}

func TestOptOutRemovesUserSecretAndFinalizer(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ns := e.namespace(t, "sites-bye", map[string]string{decov1.AnnotationValkeyACL: "true"})
	user, pass := e.waitSecret(t, ns, "")
	testenv.Eventually(t, 10*time.Second, func() error { return e.authEverywhere(ctx, user, pass) })
	deleted := testutil.ToFloat64(metrics.Deleted)
	e.annotate(t, ns, map[string]*string{decov1.AnnotationValkeyACL: nil})
	testenv.Eventually(t, 20*time.Second, func() error {
		var obj corev1.Namespace
		if err := e.c.Client.Get(ctx, client.ObjectKey{Name: ns}, &obj); err != nil {
			return err
		}
		if slices.Contains(obj.Finalizers, provision.Finalizer) {
			return fmt.Errorf("finalizer still present")
		}
		if _, err := e.secret(ns); !apierrors.IsNotFound(err) {
			return fmt.Errorf("secret still present: %w", err)
		}
		return nil
	})
	for _, n := range e.nodes {
		if ok, err := e.userExists(ctx, n, user); ok || err != nil {
			t.Errorf("user %s on %s after opt-out: %v %v", user, n, ok, err)
		}
	}
	// Earlier tests' namespaces may be de-provisioned by this manager too: at least one.
	if d := testutil.ToFloat64(metrics.Deleted) - deleted; d < 1 {
		t.Errorf("deleted counter rose by %v, want at least 1", d)
	}
	testenv.Eventually(t, 10*time.Second, func() error { return hasEvent(e.c, ns, provision.ReasonDeleted) })
}

func TestCollisionAndReservedNamesAreRefused(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	base := "coll-" + strings.ToLower(testenv.Name(t))[:6] + fmt.Sprint(time.Now().UnixNano()%100000)
	mk := func(name string) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{decov1.AnnotationValkeyACL: "true"}}}
		if err := e.c.Client.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.c.Client.Delete(context.Background(), ns) })
	}
	mk(base)
	first, pass := e.waitSecret(t, base, "")
	mk("sites-" + base)
	testenv.Eventually(t, 10*time.Second, func() error { return hasEvent(e.c, "sites-"+base, provision.ReasonUsernameCollision) })
	if _, err := e.secret("sites-" + base); !apierrors.IsNotFound(err) {
		t.Fatalf("colliding namespace got a Secret: %v", err)
	}
	var obj corev1.Namespace
	if err := e.c.Client.Get(ctx, client.ObjectKey{Name: "sites-" + base}, &obj); err != nil || slices.Contains(obj.Finalizers, provision.Finalizer) {
		t.Fatalf("colliding namespace got the finalizer: %v %v", obj.Finalizers, err)
	}
	if err := e.authEverywhere(ctx, first, pass); err != nil {
		t.Fatalf("the owner's credentials changed: %v", err)
	}
	// When the owner opts out, the other namespace gets the user, with new credentials.
	e.annotate(t, base, map[string]*string{decov1.AnnotationValkeyACL: nil})
	second, pass2 := e.waitSecret(t, "sites-"+base, "")
	if second != first || pass2 == pass {
		t.Fatalf("after the owner left: user %q (want %q), password reused %v", second, first, pass2 == pass)
	}
	testenv.Eventually(t, 10*time.Second, func() error { return e.authEverywhere(ctx, second, pass2) })

	for _, name := range []string{"sites-default", "sites-lock"} {
		if err := e.c.Client.Get(ctx, client.ObjectKey{Name: name}, &corev1.Namespace{}); apierrors.IsNotFound(err) {
			mk(name)
		} else {
			e.annotate(t, name, map[string]*string{decov1.AnnotationValkeyACL: on(), decov1.AnnotationValkeyACLSync: ptr.To(base)})
		}
		testenv.Eventually(t, 10*time.Second, func() error { return hasEvent(e.c, name, provision.ReasonReservedUsername) })
		if _, err := e.secret(name); !apierrors.IsNotFound(err) {
			t.Fatalf("reserved namespace %s got a Secret: %v", name, err)
		}
	}
	if ok, _ := e.userExists(ctx, e.set.Master.Addr, "lock"); ok {
		t.Fatal("a tenant user named lock exists")
	}
}

func TestDeleteWithValkeyDownDoesNotBlockNamespace(t *testing.T) {
	c := testenv.APIServer(t)
	r := testenv.Redis(t, servers.RedisOptions{Password: adminPassword})
	const timeout = 3 * time.Second
	startPart(t, c, tenant.Options{URL: "redis://" + r.Addr, DeleteTimeout: timeout})
	ctx := context.Background()
	ns := c.Namespace(t, "sites-down", map[string]string{decov1.AnnotationValkeyACL: "true"})
	testenv.Eventually(t, 20*time.Second, func() error {
		var s corev1.Secret
		return c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: decov1.ValkeyACLSecretName}, &s)
	})
	errs := testutil.ToFloat64(metrics.Errors.WithLabelValues(metrics.OpDelete))
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := c.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		var obj corev1.Namespace
		if err := c.Client.Get(ctx, client.ObjectKey{Name: ns}, &obj); err != nil {
			return client.IgnoreNotFound(err)
		}
		if slices.Contains(obj.Finalizers, provision.Finalizer) {
			return fmt.Errorf("finalizer still present")
		}
		return nil
	})
	if took := time.Since(start); took < timeout-500*time.Millisecond {
		t.Errorf("finalizer removed after %v, before the %v timeout", took, timeout)
	}
	if testutil.ToFloat64(metrics.Errors.WithLabelValues(metrics.OpDelete)) <= errs {
		t.Error("delete errors were not counted")
	}
	testenv.Eventually(t, 10*time.Second, func() error { return hasEvent(c, ns, provision.ReasonDeleteTimedOut) })
}

func TestFailoverResyncsEveryTenantCountedOnce(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	var users []string
	for i := range 3 {
		ns := e.namespace(t, fmt.Sprintf("sites-fo%d", i), map[string]string{decov1.AnnotationValkeyACL: "true"})
		u, p := e.waitSecret(t, ns, "")
		testenv.Eventually(t, 10*time.Second, func() error { return e.authEverywhere(ctx, u, p) })
		users = append(users, u)
	}
	// The replica loses its users, so only the failover resync can put them on the new master.
	r := e.admin(e.set.Replicas[0].Addr)
	defer r.Close()
	for _, u := range users {
		if err := r.Do(ctx, "acl", "deluser", u).Err(); err != nil {
			t.Fatal(err)
		}
	}
	failovers := testutil.ToFloat64(metrics.Failovers)
	sc := redis.NewSentinelClient(&redis.Options{Addr: e.set.Sentinels[2].Addr})
	defer sc.Close()
	start := time.Now()
	if err := sc.Failover(ctx, e.set.MasterName).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		for _, u := range users {
			if ok, err := e.userExists(ctx, e.set.Replicas[0].Addr, u); !ok {
				return fmt.Errorf("user %s missing on the promoted replica: %w", u, err)
			}
		}
		return nil
	})
	t.Logf("every tenant on the new master %v after SENTINEL FAILOVER", time.Since(start))
	time.Sleep(2 * time.Second) // let every Sentinel announce the switch
	if d := testutil.ToFloat64(metrics.Failovers) - failovers; d != 1 {
		t.Fatalf("failover counted %v times, want 1", d)
	}
}

func TestPeriodicResyncHealsAndCountsTenants(t *testing.T) {
	e := newEnvWithPeriod(t, time.Second)
	ctx := context.Background()
	ns := e.namespace(t, "sites-tick", map[string]string{decov1.AnnotationValkeyACL: "true"})
	user, pass := e.waitSecret(t, ns, "")
	testenv.Eventually(t, 10*time.Second, func() error { return e.authEverywhere(ctx, user, pass) })
	// The gauge is set from the Secrets by every round, so a wrong value is corrected.
	metrics.Tenants.Set(0)
	healed := testutil.ToFloat64(metrics.SelfHealed)
	r := e.admin(e.set.Replicas[0].Addr)
	defer r.Close()
	if err := r.Do(ctx, "acl", "deluser", user).Err(); err != nil {
		t.Fatal(err)
	}
	// No annotation changes: only the periodic round can bring the user back.
	testenv.Eventually(t, 10*time.Second, func() error { return e.authEverywhere(ctx, user, pass) })
	if d := testutil.ToFloat64(metrics.SelfHealed) - healed; d < 1 {
		t.Errorf("self-healed counter rose by %v, want at least 1", d)
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if g := testutil.ToFloat64(metrics.Tenants); g < 1 {
			return fmt.Errorf("tenants gauge %v", g)
		}
		return nil
	})
}
