package testenv

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	siteopsrbac "github.com/siteops/siteops/config/rbac"
)

// TenantRolePrefix is the name prefix the tenant ClusterRoles get in tests, as config/default
// gives them.
const TenantRolePrefix = "siteops-"

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

var aggregateMu sync.Mutex

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
	u, err := c.Env.AddUser(envtest.User{Name: name}, nil)
	if err != nil {
		t.Fatalf("add tenant user %s: %v", name, err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-edit"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}},
	}
	if err := c.Client.Create(ctx, rb); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("bind %s to edit in %s: %v", name, ns, err)
	}
	cfg := u.Config()
	cfg.QPS, cfg.Burst = 1000, 1000
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
// controller does.
func (c *Cluster) InstallTenantRoles(ctx context.Context) error {
	aggregateMu.Lock()
	defer aggregateMu.Unlock()
	// The API server reconciles its built-in roles (edit among them) once after it starts; an
	// aggregation written before that would be reset.
	if err := c.waitForBootstrapRoles(ctx); err != nil {
		return err
	}
	roles, err := siteopsrbac.TenantRoles()
	if err != nil {
		return err
	}
	for _, r := range roles {
		want := r.DeepCopy()
		want.Name = TenantRolePrefix + r.Name
		have := &rbacv1.ClusterRole{}
		err := c.Client.Get(ctx, client.ObjectKey{Name: want.Name}, have)
		switch {
		case apierrors.IsNotFound(err):
			if err := c.Client.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
		case err != nil:
			return err
		default:
			have.Labels, have.Rules = want.Labels, want.Rules
			if err := c.Client.Update(ctx, have); err != nil {
				return err
			}
		}
	}
	return aggregate(ctx, c.Client)
}

// waitForBootstrapRoles waits until the API server has reconciled its built-in RBAC roles.
func (c *Cluster) waitForBootstrapRoles(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		_, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz/poststarthook/rbac/bootstrap-roles").DoRaw(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the API server did not finish its RBAC bootstrap: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// aggregate sets the rules of every aggregated ClusterRole to the union of the rules of the
// ClusterRoles its selectors match.
func aggregate(ctx context.Context, cl client.Client) error {
	var all rbacv1.ClusterRoleList
	if err := cl.List(ctx, &all); err != nil {
		return err
	}
	for i := range all.Items {
		agg := &all.Items[i]
		if agg.AggregationRule == nil {
			continue
		}
		var rules []rbacv1.PolicyRule
		for _, sel := range agg.AggregationRule.ClusterRoleSelectors {
			s, err := metav1.LabelSelectorAsSelector(&sel)
			if err != nil {
				return fmt.Errorf("aggregation selector of %s: %w", agg.Name, err)
			}
			for j := range all.Items {
				src := &all.Items[j]
				if src.Name == agg.Name || !s.Matches(labels.Set(src.Labels)) {
					continue
				}
				for _, r := range src.Rules {
					if !slices.ContainsFunc(rules, func(x rbacv1.PolicyRule) bool { return equalRule(x, r) }) {
						rules = append(rules, r)
					}
				}
			}
		}
		if len(rules) == len(agg.Rules) && slices.EqualFunc(rules, agg.Rules, equalRule) {
			continue
		}
		agg.Rules = rules
		if err := cl.Update(ctx, agg); err != nil {
			return fmt.Errorf("aggregate %s: %w", agg.Name, err)
		}
	}
	return nil
}

func equalRule(a, b rbacv1.PolicyRule) bool {
	return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) &&
		slices.Equal(a.Verbs, b.Verbs) && slices.Equal(a.ResourceNames, b.ResourceNames) &&
		slices.Equal(a.NonResourceURLs, b.NonResourceURLs)
}
