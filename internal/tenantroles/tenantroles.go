// Package tenantroles installs siteops' tenant ClusterRoles (config/rbac/tenant_roles.yaml) and
// aggregates them into the built-in admin, edit and view roles, as kube-controller-manager's
// clusterrole-aggregation controller would, for API servers that run without one: the tests'
// API servers and `siteops dev up`. Without it a tenant bound to `edit` may use no siteops kind.
package tenantroles

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	siteopsrbac "github.com/siteops/siteops/config/rbac"
)

// Prefix is the name prefix the tenant ClusterRoles get, as config/default and the chart (with
// its default release name) give them.
const Prefix = "siteops-"

// mu keeps aggregations of one process from overwriting each other's updates.
var mu sync.Mutex

// Install creates (or updates) the tenant ClusterRoles, named Prefix+name, and aggregates every
// ClusterRole that has an aggregation rule. It first waits for the API server to reconcile its
// built-in roles, which would otherwise reset an aggregation written before.
func Install(ctx context.Context, cfg *rest.Config, c client.Client) error {
	mu.Lock()
	defer mu.Unlock()
	if err := waitForBootstrapRoles(ctx, cfg); err != nil {
		return err
	}
	roles, err := siteopsrbac.TenantRoles()
	if err != nil {
		return err
	}
	for _, r := range roles {
		want := r.DeepCopy()
		want.Name = Prefix + r.Name
		have := &rbacv1.ClusterRole{}
		err := c.Get(ctx, client.ObjectKey{Name: want.Name}, have)
		switch {
		case apierrors.IsNotFound(err):
			if err := c.Create(ctx, want); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create ClusterRole %s: %w", want.Name, err)
			}
		case err != nil:
			return fmt.Errorf("read ClusterRole %s: %w", want.Name, err)
		default:
			have.Labels, have.Rules = want.Labels, want.Rules
			if err := c.Update(ctx, have); err != nil {
				return fmt.Errorf("update ClusterRole %s: %w", want.Name, err)
			}
		}
	}
	return aggregate(ctx, c)
}

// waitForBootstrapRoles waits until the API server has reconciled its built-in RBAC roles.
func waitForBootstrapRoles(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
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
		return fmt.Errorf("list ClusterRoles: %w", err)
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
