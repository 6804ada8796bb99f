package testenv

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/siteops/siteops/internal/tenantroles"
)

// TenantRolePrefix is the name prefix the tenant ClusterRoles get in tests, as config/default
// gives them.
const TenantRolePrefix = tenantroles.Prefix

// Tenant is a user bound to the built-in `edit` ClusterRole, with siteops' aggregated tenant
// roles, in its own namespace only: the threat model's tenant.
type Tenant struct {
	// Name is the user name.
	Name string
	// Namespace is the tenant's own namespace.
	Namespace string
	// Config authenticates as the tenant (its own client certificate).
	Config *rest.Config
	// Client acts as the tenant, with the siteops scheme.
	Client client.Client
}

// Tenant creates a namespace (named from prefix, with the given annotations, set by the admin as
// the platform team would) and a user bound to `edit` in it and nowhere else. It installs the
// tenant ClusterRoles of config/rbac first and aggregates them into admin, edit and view, which
// the cluster's controller manager would do and envtest has none of.
func (c *Cluster) Tenant(t testing.TB, prefix string, nsAnnotations map[string]string) *Tenant {
	t.Helper()
	if err := c.InstallTenantRoles(context.Background()); err != nil {
		t.Fatalf("install tenant roles: %v", err)
	}
	ns := c.Namespace(t, prefix, nsAnnotations)
	return c.TenantIn(t, ns)
}

// TenantIn makes a user bound to `edit` in the existing namespace ns only.
func (c *Cluster) TenantIn(t testing.TB, ns string) *Tenant {
	t.Helper()
	ctx := context.Background()
	if err := c.InstallTenantRoles(ctx); err != nil {
		t.Fatalf("install tenant roles: %v", err)
	}
	name := "tenant-" + ns
	cfg := c.UserConfig(t, name)
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-edit"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}},
	}
	if err := c.Client.Create(ctx, rb); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("bind %s to edit in %s: %v", name, ns, err)
	}
	cl, err := client.New(cfg, client.Options{Scheme: c.Scheme})
	if err != nil {
		t.Fatalf("tenant client: %v", err)
	}
	// The binding takes effect once the authorizer's informers have it.
	Eventually(t, time.Minute, func() error {
		if err := cl.List(ctx, &rbacv1.RoleBindingList{}, client.InNamespace(ns)); err == nil {
			return fmt.Errorf("tenant %s may list rolebindings, which edit does not grant", name)
		}
		if err := c.canCreate(ctx, name, ns); err != nil {
			// Aggregate again in case something reset the built-in roles meanwhile.
			return errors.Join(err, c.InstallTenantRoles(ctx))
		}
		return nil
	})
	return &Tenant{Name: name, Namespace: ns, Config: cfg, Client: cl}
}

// canCreate asks the API server whether user may create Decofiles in ns yet.
func (c *Cluster) canCreate(ctx context.Context, user, ns string) error {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user, Groups: []string{"system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Group: "deco.sites", Resource: "decofiles"},
	}}
	if err := c.Client.Create(ctx, sar); err != nil {
		return err
	}
	if !sar.Status.Allowed {
		return fmt.Errorf("tenant %s may not create decofiles in %s yet", user, ns)
	}
	return nil
}

// InstallTenantRoles creates (or updates) the tenant ClusterRoles and aggregates every
// ClusterRole that has an aggregation rule, as kube-controller-manager's clusterrole-aggregation
// controller does (tenantroles.Install, which `siteops dev up` runs too).
func (c *Cluster) InstallTenantRoles(ctx context.Context) error {
	return tenantroles.Install(ctx, c.Config, c.Client)
}

// UserConfig returns a REST config for user in groups, authenticated by a client certificate of
// its own, with client-side throttling loose enough for load tests.
func (c *Cluster) UserConfig(t testing.TB, user string, groups ...string) *rest.Config {
	t.Helper()
	u, err := c.Env.AddUser(envtest.User{Name: user, Groups: groups}, nil)
	if err != nil {
		t.Fatalf("add user %s: %v", user, err)
	}
	cfg := u.Config()
	cfg.QPS, cfg.Burst = 1000, 1000
	return cfg
}

// UserClient returns a client acting as user in groups.
func (c *Cluster) UserClient(t testing.TB, user string, groups ...string) client.Client {
	t.Helper()
	cl, err := client.New(c.UserConfig(t, user, groups...), client.Options{Scheme: c.Scheme})
	if err != nil {
		t.Fatalf("client of %s: %v", user, err)
	}
	return cl
}
