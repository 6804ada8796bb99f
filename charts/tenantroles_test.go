package charts_test

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"

	siteopsrbac "github.com/siteops/siteops/config/rbac"
)

// TestTenantRoles checks that the chart ships config/rbac's tenant ClusterRoles, aggregated into
// the built-in roles with their labels and rules unchanged, and none when turned off.
func TestTenantRoles(t *testing.T) {
	want, err := siteopsrbac.TenantRoles()
	if err != nil || len(want) == 0 {
		t.Fatalf("tenant roles in config/rbac: %v (%d)", err, len(want))
	}
	m := render(t, "siteops", namespace, nil)
	for _, w := range want {
		var got rbacv1.ClusterRole
		if !m.get(t, "ClusterRole", "siteops-"+w.Name, &got) {
			t.Errorf("the chart does not render ClusterRole siteops-%s", w.Name)
			continue
		}
		for k, v := range w.Labels {
			if got.Labels[k] != v {
				t.Errorf("ClusterRole siteops-%s label %s=%q, want %q", w.Name, k, got.Labels[k], v)
			}
		}
		if !equalJSON(t, got.Rules, w.Rules) {
			t.Errorf("ClusterRole siteops-%s rules differ from config/rbac/tenant_roles.yaml", w.Name)
		}
		for _, r := range got.Rules {
			for _, v := range r.Verbs {
				for _, res := range r.Resources {
					if len(res) > 7 && res[len(res)-7:] == "/status" && v != "get" && v != "list" && v != "watch" {
						t.Errorf("ClusterRole siteops-%s lets tenants %s %s", w.Name, v, res)
					}
				}
			}
		}
	}
	off := render(t, "siteops", namespace, values(t, "tenantRoles: {enabled: false}"))
	for _, w := range want {
		if off.get(t, "ClusterRole", "siteops-"+w.Name, nil) {
			t.Errorf("tenantRoles.enabled=false still renders siteops-%s", w.Name)
		}
	}
}
