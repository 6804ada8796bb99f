package inject_test

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resource"
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
		t.Errorf("ambiguous, same age: %v %q", d, w)
	}
	// The older one holds the deploymentId (the delivery controller delivers only it).
	items[0].CreationTimestamp = metav1.NewTime(time.Unix(100, 0))
	items[1].CreationTimestamp = metav1.NewTime(time.Unix(200, 0))
	if d, w := inject.ByDeploymentID(items, "shop"); d == nil || d.Name != "b" || len(w) != 1 || !strings.Contains(w[0], `using "b"`) {
		t.Errorf("ambiguous, b older: %v %q", d, w)
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

func kustomizeBuild(t *testing.T, dir string) []*resource.Resource {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return res.Resources()
}

func decodeResource[T any](t *testing.T, r *resource.Resource) *T {
	t.Helper()
	data, err := r.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	out := new(T)
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestManifestsMatchCode builds both install overlays and checks that the webhook configurations
// they install equal what the code builds (which dev up and the tests install, and whose names
// the manager patches caBundle on), and that the manager gets its certificate folder.
func TestManifestsMatchCode(t *testing.T) {
	wantM, wantV := inject.WebhookConfigurations(inject.ServiceClientConfig("siteops-system", "siteops-webhook-service", 443))
	for _, overlay := range []string{"certmanager", "selfsigned"} {
		t.Run(overlay, func(t *testing.T) {
			var gotM *admissionregistrationv1.MutatingWebhookConfiguration
			var gotV *admissionregistrationv1.ValidatingWebhookConfiguration
			var manager *appsv1.Deployment
			var svc *corev1.Service
			kinds := map[string]bool{}
			for _, r := range kustomizeBuild(t, "../../../config/"+overlay) {
				kinds[r.GetKind()] = true
				switch r.GetKind() {
				case "MutatingWebhookConfiguration":
					gotM = decodeResource[admissionregistrationv1.MutatingWebhookConfiguration](t, r)
				case "ValidatingWebhookConfiguration":
					// Other parts (the mirror's CommitRequest recorder) have their own configuration.
					if r.GetName() == inject.ValidatingConfigName {
						gotV = decodeResource[admissionregistrationv1.ValidatingWebhookConfiguration](t, r)
					}
				case "Deployment":
					manager = decodeResource[appsv1.Deployment](t, r)
				case "Service":
					if r.GetName() == "siteops-webhook-service" {
						svc = decodeResource[corev1.Service](t, r)
					}
				}
			}
			if gotM == nil || gotV == nil || manager == nil || svc == nil {
				t.Fatalf("build lacks webhook configurations, the manager or the webhook Service")
			}
			if gotM.Name != inject.MutatingConfigName || !equality.Semantic.DeepEqual(gotM.Webhooks, wantM.Webhooks) {
				a, _ := json.MarshalIndent(gotM, "", " ")
				b, _ := json.MarshalIndent(wantM, "", " ")
				t.Errorf("mutating webhook differs:\nbuilt %s\ncode  %s", a, b)
			}
			if gotV.Name != inject.ValidatingConfigName || !equality.Semantic.DeepEqual(gotV.Webhooks, wantV.Webhooks) {
				a, _ := json.MarshalIndent(gotV, "", " ")
				b, _ := json.MarshalIndent(wantV, "", " ")
				t.Errorf("validating webhook differs:\nbuilt %s\ncode  %s", a, b)
			}
			if svc.Namespace != "siteops-system" || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(manager.Spec.Template.Labels)) {
				t.Errorf("webhook Service %s/%s does not select the manager's pods", svc.Namespace, svc.Name)
			}
			mounted := false
			for _, m := range manager.Spec.Template.Spec.Containers[0].VolumeMounts {
				mounted = mounted || m.MountPath == "/tmp/k8s-webhook-server/serving-certs"
			}
			if !mounted {
				t.Error("the manager has no volume at its webhook cert folder (its root filesystem is read-only)")
			}
			for _, w := range []string{gotM.Annotations["cert-manager.io/inject-ca-from"], gotV.Annotations["cert-manager.io/inject-ca-from"]} {
				if overlay == "certmanager" && w != "siteops-system/siteops-serving-cert" {
					t.Errorf("inject-ca-from = %q", w)
				}
			}
			if overlay == "certmanager" && (!kinds["Certificate"] || !kinds["Issuer"]) {
				t.Error("the cert-manager overlay lacks the Certificate or its Issuer")
			}
			if overlay == "selfsigned" && !slices.Contains(manager.Spec.Template.Spec.Containers[0].Args, "--webhook-self-signed") {
				t.Errorf("manager args %v lack --webhook-self-signed", manager.Spec.Template.Spec.Containers[0].Args)
			}
		})
	}
}

func TestInjectedNeedsTheTokenFingerprint(t *testing.T) {
	tpl := &inject.Template{Containers: []corev1.Container{{Name: "app", Env: []corev1.EnvVar{{Name: decov1.EnvRelease, Value: "file:///x.json"}}}}}
	if inject.Injected(tpl, "site") {
		t.Error("a hand-configured DECO_RELEASE counts as an injection")
	}
	inject.Apply(tpl, configMapPlan())
	if !inject.Injected(tpl, "site") || inject.Injected(tpl, "other") {
		t.Error("fingerprint not recognised for the right Decofile only")
	}
	inject.Strip(tpl)
	if inject.Injected(tpl, "site") || len(tpl.Volumes) != 0 || len(tpl.Containers[0].Env) != 0 || len(tpl.Containers[0].VolumeMounts) != 0 {
		t.Errorf("Strip left %+v", tpl)
	}
}

// TestMalformedTemplateIsAClearError: mutating admission runs before schema validation, so the
// webhook can see a malformed template; it answers with an error naming the field.
func TestMalformedTemplateIsAClearError(t *testing.T) {
	h := &inject.Injector{}
	raw := []byte(`{"apiVersion":"serving.knative.dev/v1","kind":"Service","metadata":{"name":"s","annotations":{"deco.sites/decofile-inject":"true"}},
	"spec":{"template":{"spec":{"containers":[{"name":"app","env":"not-a-list"}]}}}}`)
	resp := h.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Namespace: "ns", Kind: metav1.GroupVersionKind{Kind: "Service"},
		Object: runtime.RawExtension{Raw: raw},
	}})
	if resp.Allowed || resp.Result == nil || resp.Result.Code != 400 || !strings.Contains(resp.Result.Message, "containers[0]") {
		t.Errorf("response = %+v, want a 400 naming containers[0]", resp.Result)
	}
}
