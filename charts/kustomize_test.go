package charts_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// kustomizeBuild builds a folder of config/ as `kubectl apply -k` would.
func kustomizeBuild(t *testing.T, dir string) manifests {
	t.Helper()
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var m manifests
	for _, r := range rm.Resources() {
		b, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := json.Unmarshal(b, &u.Object); err != nil {
			t.Fatal(err)
		}
		m.objs = append(m.objs, u)
	}
	return m
}

// TestKustomizeEquivalent checks that config/default installs what the chart installs with its
// default values (release "siteops" in siteops-system), and config/selfsigned what it installs
// with flags.webhook-self-signed: the same manager settings flag by flag, the same objects apart
// from RBAC, and RBAC granting the same permissions (one role there, one per part here).
func TestKustomizeEquivalent(t *testing.T) {
	for dir, doc := range map[string]string{"default": "", "selfsigned": valueSets["self-signed"]} {
		t.Run(dir, func(t *testing.T) {
			k := kustomizeBuild(t, "../config/"+dir)
			h := render(t, "siteops", namespace, values(t, doc))

			kfs, _ := parseArgs(t, k.deployment(t))
			hfs, _ := parseArgs(t, h.deployment(t))
			kfs.VisitAll(func(f *pflag.Flag) {
				if got := hfs.Lookup(f.Name).Value.String(); got != f.Value.String() {
					t.Errorf("--%s: config/%s runs the manager with %s, the chart with %s", f.Name, dir, f.Value, got)
				}
			})
			kd, hd := k.deployment(t), h.deployment(t)
			if kd.Name != hd.Name || *kd.Spec.Replicas != *hd.Spec.Replicas {
				t.Errorf("Deployment %s with %d replicas vs the chart's %s with %d", kd.Name, *kd.Spec.Replicas, hd.Name, *hd.Spec.Replicas)
			}
			if a, b := mountPaths(kd), mountPaths(hd); !slices.Equal(a, b) {
				t.Errorf("mounts differ: config/%s %v, chart %v", dir, a, b)
			}

			// The chart's NetworkPolicy admits the API server by values the cluster decides
			// (networkPolicy.apiServer); config/ leaves network policy to the platform.
			skip := map[string]bool{"Namespace": true, "CustomResourceDefinition": true, "ClusterRole": true, "ClusterRoleBinding": true, "Role": true, "RoleBinding": true, "NetworkPolicy": true}
			kNames, hNames := names(k, skip), names(h, skip)
			if !slices.Equal(kNames, hNames) {
				t.Errorf("objects differ:\nconfig/%s: %v\nchart:     %v", dir, kNames, hNames)
			}
			if len(k.kind("CustomResourceDefinition")) != len(loadChart(t).CRDObjects()) {
				t.Errorf("config/%s has %d CRDs, the chart %d", dir, len(k.kind("CustomResourceDefinition")), len(loadChart(t).CRDObjects()))
			}

			// config/rbac has one role generated from every marker, the chart one per part and
			// the certificate rotator's only in self-signed mode.
			kp, hp := permissions(t, k), permissions(t, h)
			extra := []string{}
			if dir == "default" {
				extra = permissions(t, manifests{objs: []*unstructured.Unstructured{ruleObject(t, generatedRules(t, "webhookcert"))}})
			}
			for _, p := range kp {
				if !slices.Contains(hp, p) && !slices.Contains(extra, p) {
					t.Errorf("config/%s grants %s, the chart does not", dir, p)
				}
			}
			for _, p := range hp {
				if !slices.Contains(kp, p) {
					t.Errorf("the chart grants %s, config/%s does not (run make manifests?)", p, dir)
				}
			}
		})
	}
}

func mountPaths(d *appsv1.Deployment) []string {
	var out []string
	for _, m := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
		out = append(out, m.MountPath)
	}
	slices.Sort(out)
	return out
}

func names(m manifests, skip map[string]bool) []string {
	var out []string
	for _, o := range m.objs {
		if !skip[o.GetKind()] {
			out = append(out, o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName())
		}
	}
	slices.Sort(out)
	return out
}

func ruleObject(t *testing.T, rules []rbacv1.PolicyRule) *unstructured.Unstructured {
	t.Helper()
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&rbacv1.ClusterRole{Rules: rules})
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetKind("ClusterRole")
	u.SetName("generated")
	return u
}

// permissions flattens every rule bound to the manager into "group/resource verb" strings, from
// ClusterRoles and Roles alike (a Role grants less, so the chart's Roles must be covered too).
func permissions(t *testing.T, m manifests) []string {
	t.Helper()
	var out []string
	add := func(rules []rbacv1.PolicyRule) {
		for _, r := range rules {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						out = append(out, fmt.Sprintf("%s/%s %s", g, res, v))
					}
				}
			}
		}
	}
	for _, o := range m.kind("ClusterRole") {
		var r rbacv1.ClusterRole
		m.get(t, "ClusterRole", o.GetName(), &r)
		add(r.Rules)
	}
	for _, o := range m.kind("Role") {
		var r rbacv1.Role
		m.get(t, "Role", o.GetName(), &r)
		add(r.Rules)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
