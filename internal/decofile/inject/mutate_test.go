package inject_test

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/inject"
)

func configMapPlan() inject.Plan {
	return inject.Plan{
		Decofile: "site", DeploymentID: "site", Target: decov1.TargetConfigMap, ConfigMap: "decofile-site",
		Format: decov1.FormatJSON, MountPath: decov1.DefaultMountPath, ReloadSecret: "decofile-site-reload", ValkeyACL: true,
	}
}

func TestApplyIsIdempotent(t *testing.T) {
	for _, p := range []inject.Plan{configMapPlan(), func() inject.Plan {
		p := configMapPlan()
		p.Target, p.S3URL, p.S3Host = decov1.TargetS3, "https://cdn.test/k", "cdn.test"
		return p
	}()} {
		tpl := &inject.Template{Containers: []corev1.Container{{Name: "app", Env: []corev1.EnvVar{{Name: "KEEP", Value: "1"}}}}}
		if w := inject.Apply(tpl, p); len(w) != 0 {
			t.Errorf("first apply warned: %q", w)
		}
		once, _ := json.Marshal(tpl)
		if w := inject.Apply(tpl, p); len(w) != 0 {
			t.Errorf("second apply warned: %q", w)
		}
		twice, _ := json.Marshal(tpl)
		if string(once) != string(twice) {
			t.Errorf("second apply changed the template:\n%s\n%s", once, twice)
		}
		if tpl.Containers[0].Env[0].Name != "KEEP" {
			t.Errorf("existing env moved: %+v", tpl.Containers[0].Env)
		}
	}
}

func TestApplyKeepsDefaultedVolume(t *testing.T) {
	mode := int32(0o644)
	tpl := &inject.Template{
		Volumes:    []corev1.Volume{{Name: inject.VolumeName, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "decofile-site"}, DefaultMode: &mode}}}},
		Containers: []corev1.Container{{Name: "app"}},
	}
	inject.Apply(tpl, configMapPlan())
	if tpl.Volumes[0].ConfigMap.DefaultMode == nil {
		t.Error("the API server's defaultMode was dropped: re-admission would change the template")
	}
}

func TestSwitchToS3RemovesMount(t *testing.T) {
	tpl := &inject.Template{Containers: []corev1.Container{{Name: "app"}}}
	inject.Apply(tpl, configMapPlan())
	p := configMapPlan()
	p.Target, p.S3URL, p.S3Host = decov1.TargetS3, "https://cdn.test/k", "cdn.test"
	inject.Apply(tpl, p)
	if len(tpl.Volumes) != 0 || len(tpl.Containers[0].VolumeMounts) != 0 {
		t.Errorf("configmap volume left after switching to s3: %+v", tpl)
	}
}

func TestS3NotConfiguredWarns(t *testing.T) {
	tpl := &inject.Template{Containers: []corev1.Container{{Name: "app"}}}
	p := configMapPlan()
	p.Target = decov1.TargetS3
	w := inject.Apply(tpl, p)
	if len(w) != 1 || !strings.Contains(w[0], "no S3 public host") {
		t.Errorf("warnings = %q", w)
	}
	for _, e := range tpl.Containers[0].Env {
		if e.Name == decov1.EnvRelease {
			t.Errorf("%s set without an S3 host: %q", decov1.EnvRelease, e.Value)
		}
	}
}

func TestUnknownContainerFallsBackWithWarning(t *testing.T) {
	tpl := &inject.Template{Containers: []corev1.Container{{Name: "web"}, {Name: "app"}}}
	p := configMapPlan()
	p.Container = "missing"
	w := inject.Apply(tpl, p)
	if len(w) != 1 || !strings.Contains(w[0], `"missing"`) {
		t.Errorf("warnings = %q", w)
	}
	if len(tpl.Containers[1].Env) == 0 || len(tpl.Containers[0].Env) != 0 {
		t.Errorf("env not in the app container: %+v", tpl.Containers)
	}
}

func TestMergeAuthorities(t *testing.T) {
	for _, tc := range []struct{ list, host, want string }{
		{decov1.DefaultAllowedAuthorities, "h.test", decov1.DefaultAllowedAuthorities + ",h.test"},
		{"a.test, h.test", "h.test", "a.test,h.test"},
		{"A.test,H.TEST", "h.test", "A.test,H.TEST"},
		{"", "h.test", "h.test"},
		{"a.test,,b.test", "h.test", "a.test,b.test,h.test"},
	} {
		if got := inject.MergeAuthorities(tc.list, tc.host); got != tc.want {
			t.Errorf("MergeAuthorities(%q, %q) = %q, want %q", tc.list, tc.host, got, tc.want)
		}
	}
}

func TestDefaultDecofileName(t *testing.T) {
	for ns, want := range map[string]string{"sites-loja": "decofile-loja-main", "loja": "decofile-loja-main", "sites-sites-x": "decofile-sites-x-main"} {
		if got := inject.DefaultDecofileName(ns); got != want {
			t.Errorf("DefaultDecofileName(%q) = %q, want %q", ns, got, want)
		}
	}
}

func TestByDeploymentID(t *testing.T) {
	items := []decov1.Decofile{
		{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Spec: decov1.DecofileSpec{DeploymentID: "shop"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: decov1.DecofileSpec{DeploymentID: "shop"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "blog"}},
	}
	if d, w := inject.ByDeploymentID(items, "blog"); d == nil || d.Name != "blog" || len(w) != 0 {
		t.Errorf("by name fallback: %v %q", d, w)
	}
	if d, w := inject.ByDeploymentID(items, "shop"); d == nil || d.Name != "a" || len(w) != 1 {
		t.Errorf("ambiguous: %v %q", d, w)
	}
	if d, _ := inject.ByDeploymentID(items, "none"); d != nil {
		t.Errorf("no match returned %v", d)
	}
}

func TestWriteTemplateTouchesOnlyChangedFields(t *testing.T) {
	raw := `{"apiVersion":"serving.knative.dev/v1","kind":"Service","metadata":{"name":"s"},
	"spec":{"traffic":[{"percent":100,"latestRevision":true}],"template":{"spec":{"containerConcurrency":10,
	"containers":[{"name":"app","image":"i","ports":[{"containerPort":8000}],"futureField":{"x":1}}]}}}}`
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	orig := u.DeepCopy()
	tpl, err := inject.ReadTemplate(u)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := inject.ReadTemplate(orig)
	if err := inject.WriteTemplate(u, before, tpl); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(u.Object, orig.Object) {
		t.Fatalf("writing an unchanged template changed the object")
	}
	inject.Apply(tpl, configMapPlan())
	if err := inject.WriteTemplate(u, before, tpl); err != nil {
		t.Fatal(err)
	}
	c, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	app := c[0].(map[string]any)
	if !reflect.DeepEqual(app["futureField"], map[string]any{"x": int64(1)}) || app["ports"] == nil {
		t.Errorf("unknown container fields lost: %v", app)
	}
	if _, ok := app["resources"]; ok {
		t.Errorf("typed round trip added fields: %v", app)
	}
	if cc, _, _ := unstructured.NestedInt64(u.Object, "spec", "template", "spec", "containerConcurrency"); cc != 10 {
		t.Errorf("containerConcurrency lost")
	}
}

// TestManifestsMatchCode keeps config/webhook in step with the configurations the code builds
// (which dev up and the tests install).
func TestManifestsMatchCode(t *testing.T) {
	f, err := os.Open("../../../config/webhook/manifests.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var fromYAMLm *admissionregistrationv1.MutatingWebhookConfiguration
	var fromYAMLv *admissionregistrationv1.ValidatingWebhookConfiguration
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			break
		}
		data, _ := u.MarshalJSON()
		switch u.GetKind() {
		case "MutatingWebhookConfiguration":
			fromYAMLm = &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := json.Unmarshal(data, fromYAMLm); err != nil {
				t.Fatal(err)
			}
		case "ValidatingWebhookConfiguration":
			fromYAMLv = &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := json.Unmarshal(data, fromYAMLv); err != nil {
				t.Fatal(err)
			}
		}
	}
	if fromYAMLm == nil || fromYAMLv == nil {
		t.Fatal("config/webhook/manifests.yaml lacks a webhook configuration")
	}
	m, v := inject.WebhookConfigurations(inject.ServiceClientConfig("siteops-system", "siteops-webhook-service", 443))
	if !equality.Semantic.DeepEqual(m.Webhooks, fromYAMLm.Webhooks) || m.Name != fromYAMLm.Name {
		gotJSON, _ := json.MarshalIndent(fromYAMLm.Webhooks, "", " ")
		wantJSON, _ := json.MarshalIndent(m.Webhooks, "", " ")
		t.Errorf("mutating webhook differs:\nyaml %s\ncode %s", gotJSON, wantJSON)
	}
	if !equality.Semantic.DeepEqual(v.Webhooks, fromYAMLv.Webhooks) || v.Name != fromYAMLv.Name {
		gotJSON, _ := json.MarshalIndent(fromYAMLv.Webhooks, "", " ")
		wantJSON, _ := json.MarshalIndent(v.Webhooks, "", " ")
		t.Errorf("validating webhook differs:\nyaml %s\ncode %s", gotJSON, wantJSON)
	}
}

// TestCertManagerKustomization builds config/certmanager and checks that both webhook
// configurations ask cert-manager's CA injector for the serving certificate's CA.
func TestCertManagerKustomization(t *testing.T) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), "../../../config/certmanager")
	if err != nil {
		t.Fatalf("kustomize build config/certmanager: %v", err)
	}
	kinds := map[string]bool{}
	for _, r := range res.Resources() {
		kinds[r.GetKind()] = true
		if strings.HasSuffix(r.GetKind(), "WebhookConfiguration") {
			if got := r.GetAnnotations()["cert-manager.io/inject-ca-from"]; got != "siteops-system/siteops-serving-cert" {
				t.Errorf("%s %s: inject-ca-from = %q", r.GetKind(), r.GetName(), got)
			}
		}
	}
	for _, want := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "Certificate", "Issuer", "Service"} {
		if !kinds[want] {
			t.Errorf("kustomize output lacks a %s", want)
		}
	}
}
