package resolve

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
)

var lw = metav1.Verbs{"get", "list", "watch", "create", "update", "delete"}

func fakeDiscovery() ([]*metav1.APIGroup, []*metav1.APIResourceList) {
	groups := []*metav1.APIGroup{
		{Name: "", PreferredVersion: metav1.GroupVersionForDiscovery{Version: "v1"}},
		{Name: "apps", PreferredVersion: metav1.GroupVersionForDiscovery{Version: "v1"}},
		{Name: "example.com", PreferredVersion: metav1.GroupVersionForDiscovery{Version: "v2"}},
	}
	lists := []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: lw},
			{Name: "secrets", Kind: "Secret", Namespaced: true, Verbs: lw},
			{Name: "pods", Kind: "Pod", Namespaced: true, Verbs: lw},
			{Name: "pods/status", Kind: "Pod", Namespaced: true, Verbs: lw},
			{Name: "events", Kind: "Event", Namespaced: true, Verbs: lw},
			{Name: "bindings", Kind: "Binding", Namespaced: true, Verbs: metav1.Verbs{"create"}},
			{Name: "namespaces", Kind: "Namespace", Namespaced: false, Verbs: lw},
		}},
		{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{
			{Name: "deployments", Kind: "Deployment", Namespaced: true, Verbs: lw},
			{Name: "controllerrevisions", Kind: "ControllerRevision", Namespaced: true, Verbs: lw},
		}},
		{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: lw}}},
		{GroupVersion: "example.com/v2", APIResources: []metav1.APIResource{{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: lw}}},
	}
	return groups, lists
}

func TestRulesWildcardExcludesNoisySecretsSubresources(t *testing.T) {
	g, l := fakeDiscovery()
	res, err := Rules(g, l, []mirrorv1alpha1.ResourceRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Operations: []mirrorv1alpha1.Operation{"CREATE"}}}, true)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range res.Resources {
		got = append(got, r.GVR.String()+":"+string(r.Operations[0]))
	}
	if strings.Join(got, " ") != "/v1, Resource=configmaps:CREATE apps/v1, Resource=deployments:CREATE example.com/v2, Resource=widgets:CREATE" {
		t.Fatalf("resources: %v", got)
	}
	var ex []string
	for _, e := range res.Excluded {
		ex = append(ex, e.Resource)
	}
	if strings.Join(ex, " ") != "controllerrevisions.apps events pods secrets" {
		t.Fatalf("excluded: %v", ex)
	}
}

func TestRulesExplicitVersionsScopeAndErrors(t *testing.T) {
	g, l := fakeDiscovery()
	res, err := Rules(g, l, []mirrorv1alpha1.ResourceRule{{APIGroups: []string{"example.com"}, APIVersions: []string{"v1"}, Resources: []string{"widgets"}}}, true)
	if err != nil || len(res.Resources) != 1 || res.Resources[0].APIVersion() != "example.com/v1" || len(res.Resources[0].Operations) != 3 {
		t.Fatalf("%+v %v", res, err)
	}
	res, err = Rules(g, l, []mirrorv1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"*"}}}, false)
	if err != nil || len(res.Resources) != 1 || res.Resources[0].GVR.Resource != "namespaces" {
		t.Fatalf("cluster scope: %+v %v", res, err)
	}
	_, err = Rules(g, l, []mirrorv1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"bindings"}}}, true)
	if err == nil || !strings.Contains(err.Error(), "matches no namespaced resource") {
		t.Fatalf("unwatchable: %v", err)
	}
}
