package charts_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/spf13/pflag"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
// with flags.webhook-self-signed: the same manager settings flag by flag and the same objects
// apart from RBAC, which TestRBACSameInBothInstalls compares part by part.
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
