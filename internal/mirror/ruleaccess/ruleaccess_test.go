package ruleaccess_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/mirror"
	"github.com/siteops/siteops/internal/mirror/ruleaccess"
	"github.com/siteops/siteops/internal/scheme"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// TestMain shares one API server whose WatchRule webhook configuration points at the port the
// tests' manager serves on.
func TestMain(m *testing.M) {
	logf.SetLogger(logr.Discard())
	port, err := servers.FreePort("127.0.0.1")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	vwc := ruleaccess.WebhookConfiguration(func(path string) admissionregistrationv1.WebhookClientConfig {
		u := "https://127.0.0.1:" + strconv.Itoa(port) + path
		return admissionregistrationv1.WebhookClientConfig{URL: &u}
	})
	testenv.Main(m, servers.APIServerOptions{Webhooks: envtest.WebhookInstallOptions{
		LocalServingHost: "127.0.0.1", LocalServingPort: port,
		ValidatingWebhooks: []*admissionregistrationv1.ValidatingWebhookConfiguration{vwc},
	}})
}

// startMirror runs the mirror part as the manager runs it by default (--watchrule-webhook on)
// with the webhook server the installed configuration calls.
func startMirror(t *testing.T, c *testenv.Cluster) (stop func()) {
	t.Helper()
	wio := c.Env.WebhookInstallOptions
	skip := true
	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{
		Scheme:                 scheme.New(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: &skip},
		WebhookServer:          webhook.NewServer(webhook.Options{Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := mirror.Setup(mgr, mirror.Options{WatchRuleWebhook: true}); err != nil {
		t.Fatal(err)
	}
	stop = testenv.StartManager(t, mgr)
	testenv.Eventually(t, 30*time.Second, func() error { return mgr.GetWebhookServer().StartedChecker()(nil) })
	return stop
}

// may asks the API server whether user may verb group/resource in namespace.
func may(t *testing.T, c *testenv.Cluster, user, verb, group, resource, namespace string) bool {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user, Groups: []string{"system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: verb, Group: group, Resource: resource},
	}}
	if err := c.Client.Create(context.Background(), sar); err != nil {
		t.Fatal(err)
	}
	return sar.Status.Allowed
}

func watchRule(ns, name string, rules ...mirrorv1alpha1.ResourceRule) *mirrorv1alpha1.WatchRule {
	return &mirrorv1alpha1.WatchRule{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       mirrorv1alpha1.WatchRuleSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "site"}, Rules: rules},
	}
}

func rule(group string, resources ...string) mirrorv1alpha1.ResourceRule {
	return mirrorv1alpha1.ResourceRule{APIGroups: []string{group}, Resources: resources}
}

// refused fails unless err is the webhook's refusal naming every one of resources.
func refused(t *testing.T, err error, resources ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("the rule was accepted; want it refused naming %v", resources)
	}
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may only mirror what its author may read") {
		t.Fatalf("want the access webhook's refusal, got %v", err)
	}
	t.Logf("refused: %v", err)
	for _, r := range resources {
		if !strings.Contains(err.Error(), r) {
			t.Errorf("refusal %q does not name %s", err, r)
		}
	}
}

// TestTenantCannotMirrorWhatItCannotRead: a tenant bound to edit in its namespace may create
// WatchRules there, but not one that would have the mirror copy RoleBindings (which edit does
// not let it read) into its repository; a rule over ConfigMaps is accepted.
func TestTenantCannotMirrorWhatItCannotRead(t *testing.T) {
	c := testenv.APIServer(t)
	stop := startMirror(t, c)
	tenant := c.Tenant(t, "wr", nil)
	ctx := context.Background()
	const rbacGroup = "rbac.authorization.k8s.io"

	// What edit grants, asked of the real authorizer first.
	if may(t, c, tenant.Name, "list", rbacGroup, "rolebindings", tenant.Namespace) {
		t.Fatal("the tenant may list rolebindings: pick a resource edit does not grant")
	}
	if !may(t, c, tenant.Name, "list", "", "configmaps", tenant.Namespace) || !may(t, c, tenant.Name, "create", mirrorv1alpha1.GroupVersion.Group, "watchrules", tenant.Namespace) {
		t.Fatal("the tenant may not list configmaps or create watchrules in its namespace")
	}

	err := tenant.Client.Create(ctx, watchRule(tenant.Namespace, "steal", rule(rbacGroup, "rolebindings")))
	refused(t, err, "rolebindings."+rbacGroup, tenant.Name, tenant.Namespace)

	// Every resource: refused, naming the RBAC resources among others.
	err = tenant.Client.Create(ctx, watchRule(tenant.Namespace, "everything", mirrorv1alpha1.ResourceRule{APIGroups: []string{"*"}, Resources: []string{"*"}}))
	refused(t, err, "rolebindings."+rbacGroup, "roles."+rbacGroup)

	// A resource whose API is not served yet is checked by its name.
	err = tenant.Client.Create(ctx, watchRule(tenant.Namespace, "later", rule("platform.example.com", "quotas")))
	refused(t, err, "quotas.platform.example.com")

	// What the tenant may read is accepted.
	ok := watchRule(tenant.Namespace, "cms", rule("", "configmaps"))
	if err := tenant.Client.Create(ctx, ok); err != nil {
		t.Fatalf("a rule over ConfigMaps was refused: %v", err)
	}

	// Widening it later is checked like a create (a patch: the rule controller writes its status
	// meanwhile).
	widened := ok.DeepCopy()
	widened.Spec.Rules = append(widened.Spec.Rules, rule(rbacGroup, "rolebindings"))
	refused(t, tenant.Client.Patch(ctx, widened, client.MergeFrom(ok)), "rolebindings."+rbacGroup)

	// The platform team (cluster-admin) may mirror RoleBindings of the tenant's namespace.
	if err := c.Client.Create(ctx, watchRule(tenant.Namespace, "audit-rbac", rule(rbacGroup, "rolebindings"))); err != nil {
		t.Fatalf("an admin's rule over rolebindings was refused: %v", err)
	}

	// With the mirror down the check fails closed, but metadata changes never reach the webhook
	// (matchConditions), so they still go through.
	stop()
	if err := tenant.Client.Create(ctx, watchRule(tenant.Namespace, "unchecked", rule("", "configmaps"))); err == nil {
		t.Fatal("a rule was admitted unchecked while the webhook was down")
	}
	labeled := ok.DeepCopy()
	labeled.Labels = map[string]string{"team": "web"}
	if err := tenant.Client.Patch(ctx, labeled, client.MergeFrom(ok)); err != nil {
		t.Fatalf("a label change was refused while the webhook was down: %v", err)
	}
	if err := tenant.Client.Delete(ctx, ok); err != nil {
		t.Fatalf("deleting a rule failed while the webhook was down: %v", err)
	}

}

// TestClusterWatchRuleChecked: a ClusterWatchRule is checked the same way, cluster-wide: a user
// allowed to create ClusterWatchRules but not to list ClusterRoles cannot mirror them.
func TestClusterWatchRuleChecked(t *testing.T) {
	c := testenv.APIServer(t)
	startMirror(t, c)
	ctx := context.Background()
	name := "rules-" + testenv.Name(t)
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{mirrorv1alpha1.GroupVersion.Group}, Resources: []string{"clusterwatchrules"}, Verbs: []string{"create", "get", "update"}},
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"list", "watch"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}},
	}
	for _, o := range []client.Object{role, binding} {
		if err := c.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Client.Delete(context.Background(), o) })
	}
	cl := c.UserClient(t, name)
	testenv.Eventually(t, time.Minute, func() error {
		if !may(t, c, name, "create", mirrorv1alpha1.GroupVersion.Group, "clusterwatchrules", "") {
			return fmt.Errorf("binding of %s not in effect yet", name)
		}
		return nil
	})
	cwr := func(n string, r mirrorv1alpha1.ResourceRule) *mirrorv1alpha1.ClusterWatchRule {
		o := &mirrorv1alpha1.ClusterWatchRule{ObjectMeta: metav1.ObjectMeta{Name: n + "-" + name},
			Spec: mirrorv1alpha1.ClusterWatchRuleSpec{TargetRef: mirrorv1alpha1.TargetReference{Namespace: "platform", Name: "site"}, Rules: []mirrorv1alpha1.ResourceRule{r}}}
		t.Cleanup(func() { _ = c.Client.Delete(context.Background(), o) })
		return o
	}
	refused(t, cl.Create(ctx, cwr("roles", rule("rbac.authorization.k8s.io", "clusterroles"))), "clusterroles.rbac.authorization.k8s.io", "cluster-wide")
	if err := cl.Create(ctx, cwr("ns", rule("", "namespaces"))); err != nil {
		t.Fatalf("a ClusterWatchRule over namespaces, which the user may list and watch, was refused: %v", err)
	}
}

// TestSecretsRuleNeedsSecretRead: a rule selecting Secrets (mirrored encrypted when its
// GitTarget opts in) needs get, list and watch on Secrets. A user who may create WatchRules and
// list and watch Secrets but not get them is refused, by name or through a wildcard; a tenant
// bound to edit (which reads Secrets) is not.
func TestSecretsRuleNeedsSecretRead(t *testing.T) {
	c := testenv.APIServer(t)
	startMirror(t, c)
	tenant := c.Tenant(t, "sec", nil)
	ctx := context.Background()
	name := "nosecrets-" + testenv.Name(t)
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenant.Namespace, Name: name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{mirrorv1alpha1.GroupVersion.Group}, Resources: []string{"watchrules"}, Verbs: []string{"create", "get", "update"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"list", "watch"}},
		},
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: tenant.Namespace, Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}},
	}
	for _, o := range []client.Object{role, binding} {
		if err := c.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cl := c.UserClient(t, name)
	testenv.Eventually(t, time.Minute, func() error {
		if !may(t, c, name, "create", mirrorv1alpha1.GroupVersion.Group, "watchrules", tenant.Namespace) {
			return fmt.Errorf("binding of %s not in effect yet", name)
		}
		return nil
	})
	if may(t, c, name, "get", "", "secrets", tenant.Namespace) || !may(t, c, name, "list", "", "secrets", tenant.Namespace) {
		t.Fatal("the user's access to Secrets is not list and watch without get")
	}

	err := cl.Create(ctx, watchRule(tenant.Namespace, "secrets", rule("", "secrets")))
	refused(t, err, "secrets", "get, list and watch", tenant.Namespace)
	err = cl.Create(ctx, watchRule(tenant.Namespace, "core", rule("", "*")))
	refused(t, err, "secrets")
	if err := cl.Create(ctx, watchRule(tenant.Namespace, "cms", rule("", "configmaps"))); err != nil {
		t.Fatalf("a rule over ConfigMaps was refused: %v", err)
	}
	// edit reads Secrets: the tenant may mirror them (encrypted, when its target opts in).
	if err := tenant.Client.Create(ctx, watchRule(tenant.Namespace, "tenant-secrets", rule("", "secrets"))); err != nil {
		t.Fatalf("a rule over Secrets by a tenant that may read them was refused: %v", err)
	}
}
