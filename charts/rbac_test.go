package charts_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// partLabel marks each role and binding with the part that needs it; the leader election Role,
// shared by every part, has none.
const partLabel = "siteops.dev/part"

// withPush turns the push receiver on (chart values). config/ always installs the receiver's
// replay cache Role, so that setting --push-webhook-bind-address is all a kustomize user does;
// with the receiver off it grants nothing more than the leader election Role in the same
// namespace already does.
const withPush = `push-webhook-bind-address: ":9445"`

// grant is one bound role: which part it is for, where it applies and its rules.
type grant struct {
	part, role, scope string
	rules             []rbacv1.PolicyRule
}

// grants returns every role bound to the manager's ServiceAccount, by binding, sorted by part,
// scope and role name.
func grants(t *testing.T, m manifests) []grant {
	t.Helper()
	var out []grant
	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		for _, o := range m.kind(kind) {
			var b rbacv1.RoleBinding // a ClusterRoleBinding decodes into the same fields
			m.get(t, kind, o.GetName(), &b)
			if !slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool {
				return s.Kind == "ServiceAccount" && s.Name == "siteops-manager" && s.Namespace == namespace
			}) {
				continue
			}
			g := grant{role: b.RoleRef.Name, scope: "cluster-wide"}
			if kind == "RoleBinding" {
				g.scope = "namespace " + o.GetNamespace()
			}
			var labels map[string]string
			found := false
			for _, r := range m.kind(b.RoleRef.Kind) {
				if r.GetName() == b.RoleRef.Name && (b.RoleRef.Kind == "ClusterRole" || r.GetNamespace() == o.GetNamespace()) {
					var role rbacv1.Role
					m.get(t, b.RoleRef.Kind, r.GetName(), &role)
					g.rules, labels, found = role.Rules, r.GetLabels(), true
				}
			}
			if !found {
				t.Fatalf("%s %s/%s binds %s %s, which is not installed", kind, o.GetNamespace(), o.GetName(), b.RoleRef.Kind, b.RoleRef.Name)
			}
			g.part = labels[partLabel]
			if g.part == "" {
				g.part = "manager"
			}
			out = append(out, g)
		}
	}
	slices.SortFunc(out, func(a, b grant) int {
		return strings.Compare(a.part+"\x00"+a.scope+"\x00"+a.role, b.part+"\x00"+b.scope+"\x00"+b.role)
	})
	return out
}

// rights flattens the grants into one sorted list of "group/resource verb [names]" per part and
// scope, so rules that are split or ordered differently compare equal.
func rights(gs []grant) map[string][]string {
	out := map[string][]string{}
	for _, g := range gs {
		key := g.part + ", " + g.scope
		for _, r := range g.rules {
			names := slices.Clone(r.ResourceNames)
			slices.Sort(names)
			for _, grp := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						p := fmt.Sprintf("%s/%s %s", grp, res, v)
						if len(names) > 0 {
							p += " " + fmt.Sprint(names)
						}
						out[key] = append(out[key], p)
					}
				}
			}
		}
	}
	for k, v := range out {
		slices.Sort(v)
		out[k] = slices.Compact(v)
	}
	return out
}

// TestRBACSameInBothInstalls renders both install paths and compares, part by part and scope by
// scope, what they let the manager do: config/default against the chart's defaults,
// config/selfsigned against flags.webhook-self-signed (both with the push receiver on, see
// withPush). config/ is written by `make manifests` from the chart's per-part rules files, so a
// difference means one of them was edited by hand or not regenerated.
func TestRBACSameInBothInstalls(t *testing.T) {
	for dir, doc := range map[string]string{
		"default":    "flags: {" + withPush + "}",
		"selfsigned": "flags: {webhook-self-signed: true, " + withPush + "}",
	} {
		t.Run(dir, func(t *testing.T) {
			k := rights(grants(t, kustomizeBuild(t, "../config/"+dir)))
			h := rights(grants(t, render(t, "siteops", namespace, values(t, doc))))
			for _, key := range slices.Sorted(maps.Keys(k)) {
				if _, ok := h[key]; !ok {
					t.Errorf("config/%s grants %s %v; the chart grants nothing there", dir, key, k[key])
				}
			}
			for _, key := range slices.Sorted(maps.Keys(h)) {
				kr, hr := k[key], h[key]
				for _, p := range kr {
					if !slices.Contains(hr, p) {
						t.Errorf("%s: config/%s grants %s, the chart does not (run make manifests?)", key, dir, p)
					}
				}
				for _, p := range hr {
					if !slices.Contains(kr, p) {
						t.Errorf("%s: the chart grants %s, config/%s does not (run make manifests?)", key, p, dir)
					}
				}
			}
			if len(k) == 0 {
				t.Fatalf("config/%s binds no role to the manager", dir)
			}
		})
	}
}

// webhookConfigKinds maps the resources of webhook configurations to their kinds.
var webhookConfigKinds = map[string]string{
	"mutatingwebhookconfigurations":   "MutatingWebhookConfiguration",
	"validatingwebhookconfigurations": "ValidatingWebhookConfiguration",
}

// TestWebhookConfigurationWritesAreNamed fails when any install (every chart value set, every
// config/ overlay) lets the manager change webhook configurations without naming them, or names
// configurations the same install does not create: whoever can rewrite any webhook
// configuration can intercept every admission request of the cluster.
func TestWebhookConfigurationWritesAreNamed(t *testing.T) {
	builds := map[string]manifests{}
	for name, doc := range valueSets {
		builds["chart "+name] = render(t, "siteops", namespace, values(t, doc))
	}
	builds["chart self-signed, mirror only"] = render(t, "siteops", namespace, values(t, "flags: {webhook-self-signed: true, controllers: [mirror]}"))
	builds["chart self-signed, decofile only"] = render(t, "siteops", namespace, values(t, "flags: {webhook-self-signed: true, controllers: [decofile]}"))
	for _, dir := range []string{"default", "certmanager", "selfsigned"} {
		builds["config/"+dir] = kustomizeBuild(t, "../config/"+dir)
	}
	named := 0
	for _, name := range slices.Sorted(maps.Keys(builds)) {
		m := builds[name]
		for _, g := range grants(t, m) {
			for _, r := range g.rules {
				if !slices.Contains(r.APIGroups, "admissionregistration.k8s.io") && !slices.Contains(r.APIGroups, "*") {
					continue
				}
				for _, res := range r.Resources {
					kind, ok := webhookConfigKinds[res]
					if res == "*" {
						kind, ok = "webhook configuration", true
					}
					if !ok || !slices.ContainsFunc(r.Verbs, func(v string) bool { return v != "get" && v != "list" && v != "watch" }) {
						continue
					}
					if len(r.ResourceNames) == 0 {
						t.Errorf("%s: %s (%s) may %v every %s: name them", name, g.role, g.part, r.Verbs, kind)
						continue
					}
					named++
					for _, n := range r.ResourceNames {
						if !m.get(t, kind, n, nil) {
							t.Errorf("%s: %s (%s) may change %s %s, which this install does not create", name, g.role, g.part, kind, n)
						}
					}
				}
			}
		}
	}
	if named == 0 {
		t.Fatal("no install names a webhook configuration: is the self-signed certificate rotator's role gone?")
	}
}
