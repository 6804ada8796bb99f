package sanitize

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

func mustObj(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(y), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

func TestObjectDropsServerFieldsKeepsTheRest(t *testing.T) {
	in := mustObj(t, `
zeta: keep-me
data: {b: "2", a: "1"}
kind: ConfigMap
apiVersion: v1
status: {phase: whatever}
metadata:
  name: cm
  namespace: ns
  uid: 123
  resourceVersion: "5"
  generation: 3
  creationTimestamp: "2026-01-01T00:00:00Z"
  selfLink: /x
  managedFields: [{manager: kubectl}]
  ownerReferences: [{kind: X, name: y}]
  finalizers: [example.com/keep]
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: "{}"
    kustomize.toolkit.fluxcd.io/checksum: abc
    argocd.argoproj.io/tracking-id: x
    team.example.com/owner: web
  labels:
    kustomize.toolkit.fluxcd.io/name: apps
`)
	before := in.DeepCopy()
	got, err := Object(in)
	if err != nil {
		t.Fatal(err)
	}
	want := `apiVersion: v1
kind: ConfigMap
metadata:
  annotations:
    team.example.com/owner: web
  finalizers:
    - example.com/keep
  name: cm
  namespace: ns
data:
  a: "1"
  b: "2"
zeta: keep-me
`
	if string(got) != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
	if !equalObj(before, in) {
		t.Fatal("Object modified its input")
	}
	again, _ := Object(in)
	if string(again) != string(got) {
		t.Fatal("output is not stable")
	}
}

func equalObj(a, b *unstructured.Unstructured) bool {
	x, _ := yaml.Marshal(a.Object)
	y, _ := yaml.Marshal(b.Object)
	return string(x) == string(y)
}

func TestObjectWellKnownKinds(t *testing.T) {
	svc := mustObj(t, `{apiVersion: v1, kind: Service, metadata: {name: s}, spec: {clusterIP: 10.0.0.1, clusterIPs: [10.0.0.1], ipFamilies: [IPv4], ipFamilyPolicy: SingleStack, ports: [{port: 80}]}}`)
	got, _ := Object(svc)
	if strings.Contains(string(got), "10.0.0.1") || strings.Contains(string(got), "ipFamil") || !strings.Contains(string(got), "port: 80") {
		t.Fatalf("service:\n%s", got)
	}
	headless := mustObj(t, `{apiVersion: v1, kind: Service, metadata: {name: s}, spec: {clusterIP: None}}`)
	if got, _ := Object(headless); !strings.Contains(string(got), "clusterIP: None") {
		t.Fatalf("headless service lost clusterIP None:\n%s", got)
	}
	ns := mustObj(t, `{apiVersion: v1, kind: Namespace, metadata: {name: web, labels: {kubernetes.io/metadata.name: web}}, spec: {finalizers: [kubernetes]}}`)
	if got, _ := Object(ns); string(got) != "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: web\n" {
		t.Fatalf("namespace:\n%s", got)
	}
	dep := mustObj(t, `{apiVersion: apps/v1, kind: Deployment, metadata: {name: d, annotations: {deployment.kubernetes.io/revision: "3"}}, spec: {replicas: 2}}`)
	if got, _ := Object(dep); strings.Contains(string(got), "revision") || strings.Contains(string(got), "annotations") {
		t.Fatalf("deployment:\n%s", got)
	}
}

func TestPaths(t *testing.T) {
	cm := schema.GroupResource{Resource: "configmaps"}
	crb := schema.GroupResource{Group: "rbac.authorization.k8s.io", Resource: "clusterroles"}
	if got := Path("clusters/prod", cm, "web", "app"); got != "clusters/prod/web/core/configmaps/app.yaml" {
		t.Error(got)
	}
	if got := Path("", crb, "", "view"); got != "_cluster/rbac.authorization.k8s.io/clusterroles/view.yaml" {
		t.Error(got)
	}
	if SkipReason(schema.GroupResource{Resource: "secrets"}, nil) == "" {
		t.Error("secrets are not skipped")
	}
	if SkipReason(cm, mustObj(t, `{metadata: {name: app}}`)) != "" {
		t.Error("an ordinary ConfigMap is skipped")
	}
}
