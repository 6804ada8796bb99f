package charts_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/decofile/inject"
	"github.com/siteops/siteops/internal/testenv"
)

// TestCRDsAccepted applies the chart's CRDs to a real API server (server-side apply, dry run:
// the test API server already serves the same CRDs from config/crd).
func TestCRDsAccepted(t *testing.T) {
	c := testenv.APIServer(t)
	crds := loadChart(t).CRDObjects()
	if len(crds) == 0 {
		t.Fatal("the chart has no CRDs")
	}
	for _, crd := range crds {
		objs, err := decodeAll(string(crd.File.Data))
		if err != nil || len(objs) != 1 {
			t.Fatalf("%s: %d objects, %v", crd.Filename, len(objs), err)
		}
		err = c.Client.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(objs[0]),
			client.FieldOwner("siteops-chart-test"), client.ForceOwnership, client.DryRunAll)
		if err != nil {
			t.Errorf("API server rejected %s: %v", crd.Filename, err)
		}
	}
}

// install creates what the chart renders for release (named like its namespace) in the API
// server: webhook configurations by dry run (a real one would send the other tests' workloads to
// a webhook that is not running), objects of kinds the server does not serve (cert-manager,
// Prometheus Operator) skipped, everything else for real, removed at test end.
func install(t *testing.T, c *testenv.Cluster, ns string, vals map[string]any) manifests {
	t.Helper()
	ctx := context.Background()
	m := render(t, ns, ns, vals)
	for _, o := range m.objs {
		gvk := o.GroupVersionKind()
		if _, err := c.Client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); meta.IsNoMatchError(err) {
			t.Logf("skipping %s %s: the test API server does not serve %s", gvk.Kind, o.GetName(), gvk.GroupVersion())
			continue
		}
		var opts []client.CreateOption
		if strings.HasSuffix(gvk.Kind, "WebhookConfiguration") {
			opts = append(opts, client.DryRunAll)
		}
		if err := c.Client.Create(ctx, o, opts...); err != nil {
			t.Errorf("API server rejected %s %s: %v", gvk.Kind, o.GetName(), err)
			continue
		}
		if o.GetNamespace() == "" && len(opts) == 0 {
			obj := o
			t.Cleanup(func() { _ = c.Client.Delete(context.Background(), obj) })
		}
	}
	return m
}

// TestInstallAndPermissions installs the rendered chart and asks the API server's RBAC
// authorizer what the manager's ServiceAccount may do: everything the enabled parts' markers
// ask for, and nothing that only a disabled part needs.
func TestInstallAndPermissions(t *testing.T) {
	c := testenv.APIServer(t)
	cases := []struct {
		name, values string
		parts        []string
	}{
		{"all parts, self-signed", "flags: {webhook-self-signed: true}", []string{"decofile", "tenant", "mirror", "webhookcert"}},
		{"tenant only", "flags: {controllers: [tenant]}", []string{"tenant"}},
		{"decofile only", "flags: {controllers: [decofile]}", []string{"decofile"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := c.Namespace(t, "siteops", nil)
			install(t, c, ns, values(t, tc.values))
			user := fmt.Sprintf("system:serviceaccount:%s:%s-manager", ns, ns)
			granted := leaderElectionRules()
			for _, p := range tc.parts {
				granted = append(granted, generatedRules(t, p)...)
			}
			for _, p := range []string{"decofile", "tenant", "mirror", "webhookcert"} {
				enabled := slices.Contains(tc.parts, p)
				for _, r := range generatedRules(t, p) {
					for _, a := range attributes(r, ns) {
						if !enabled && (covered(ruleFor(a), granted) || a.Group == "*" || a.Resource == "*") {
							continue // also granted by an enabled part
						}
						if got := allowed(t, c, user, a); got != enabled {
							t.Errorf("%s part (enabled %v): %s %s/%s in %q allowed = %v", p, enabled, a.Verb, a.Group, resourceString(a), a.Namespace, got)
						}
					}
				}
			}
			// Leader election works in the release namespace only.
			lease := authorizationv1.ResourceAttributes{Namespace: ns, Verb: "update", Group: "coordination.k8s.io", Resource: "leases"}
			if !allowed(t, c, user, lease) {
				t.Error("the manager cannot update its leader election Lease")
			}
			lease.Namespace = "kube-system"
			if allowed(t, c, user, lease) {
				t.Error("the manager may update Leases outside its namespace")
			}
		})
	}
}

func leaderElectionRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}}
}

// attributes expands a rule into the requests it allows; namespaced requests go to a namespace
// other than the release's, where only cluster-wide grants apply. The webhookcert part's Secret
// access is asked in the release namespace, where its Role grants it.
func attributes(r rbacv1.PolicyRule, ns string) []authorizationv1.ResourceAttributes {
	var out []authorizationv1.ResourceAttributes
	for _, g := range r.APIGroups {
		for _, res := range r.Resources {
			resource, sub, _ := strings.Cut(res, "/")
			for _, v := range r.Verbs {
				target := "tenant-a"
				if g == "" && res == "secrets" && slices.Equal(r.Verbs, []string{"create", "get", "update"}) {
					target = ns
				}
				switch {
				case g == "admissionregistration.k8s.io" || res == "namespaces" || strings.HasPrefix(res, "clusterwatchrules"):
					target = ""
				}
				a := authorizationv1.ResourceAttributes{Namespace: target, Verb: v, Group: g, Resource: resource, Subresource: sub}
				// The certificate rotator may change webhook configurations by name only.
				switch {
				case g == "admissionregistration.k8s.io" && res == "mutatingwebhookconfigurations":
					a.Name = inject.MutatingConfigName
				case g == "admissionregistration.k8s.io" && res == "validatingwebhookconfigurations":
					a.Name = inject.ValidatingConfigName
				}
				out = append(out, a)
			}
		}
	}
	return out
}

func ruleFor(a authorizationv1.ResourceAttributes) rbacv1.PolicyRule {
	return rbacv1.PolicyRule{APIGroups: []string{a.Group}, Resources: []string{resourceString(a)}, Verbs: []string{a.Verb}}
}

func resourceString(a authorizationv1.ResourceAttributes) string {
	if a.Subresource != "" {
		return a.Resource + "/" + a.Subresource
	}
	return a.Resource
}

func allowed(t *testing.T, c *testenv.Cluster, user string, a authorizationv1.ResourceAttributes) bool {
	t.Helper()
	ns := strings.TrimPrefix(user, "system:serviceaccount:")
	ns, _, _ = strings.Cut(ns, ":")
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               user,
		Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
		ResourceAttributes: &a,
	}}
	if err := c.Client.Create(context.Background(), sar); err != nil {
		t.Fatalf("SubjectAccessReview: %v", err)
	}
	return sar.Status.Allowed
}

// TestRenderedKindsKnown checks with the API server's discovery that the chart renders no kind
// it does not serve, apart from the optional cert-manager and Prometheus Operator kinds.
func TestRenderedKindsKnown(t *testing.T) {
	c := testenv.APIServer(t)
	optional := map[schema.GroupKind]bool{
		{Group: "cert-manager.io", Kind: "Certificate"}:          true,
		{Group: "cert-manager.io", Kind: "Issuer"}:               true,
		{Group: "monitoring.coreos.com", Kind: "ServiceMonitor"}: true,
		{Group: "monitoring.coreos.com", Kind: "PrometheusRule"}: true,
	}
	m := render(t, "siteops", namespace, values(t, valueSets["monitoring"]))
	for _, o := range m.objs {
		gvk := o.GroupVersionKind()
		if _, err := c.Client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err != nil && !optional[gvk.GroupKind()] {
			t.Errorf("%s %s: %v", gvk, o.GetName(), err)
		}
	}
}
