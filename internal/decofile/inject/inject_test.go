package inject_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/inject"
)

var ksvcGVK = schema.GroupVersionKind{Group: "serving.knative.dev", Version: "v1", Kind: "Service"}

// decofile creates a Decofile with the given target and stored format (written to status as the
// delivery controller would) and its reload Secret.
func decofile(t *testing.T, c client.Client, ns, name, deploymentID string, target decov1.TargetType, format decov1.Format) *decov1.Decofile {
	t.Helper()
	ctx := context.Background()
	d := &decov1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: decov1.DecofileSpec{
			Source:       decov1.SourceInline,
			Inline:       &decov1.InlineSource{Value: map[string]apiextensionsv1.JSON{"home": {Raw: []byte(`{"title":"Home"}`)}}},
			DeploymentID: deploymentID,
			Target:       target,
		},
	}
	if err := c.Create(ctx, d); err != nil {
		t.Fatalf("create Decofile: %v", err)
	}
	if format != "" {
		d.Status.Format = format
		if err := c.Status().Update(ctx, d); err != nil {
			t.Fatalf("write Decofile status: %v", err)
		}
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: d.ReloadSecretName(), Namespace: ns},
		StringData: map[string]string{decov1.ReloadTokenKey: "s3cr3t"},
	}
	if err := c.Create(ctx, sec); err != nil {
		t.Fatalf("create reload Secret: %v", err)
	}
	return d
}

// ksvc builds a Knative Service with one container per name (each with the given env).
func ksvc(ns, name string, annotations, labels map[string]string, env []any, containers ...string) *unstructured.Unstructured {
	var cs []any
	for _, c := range containers {
		ct := map[string]any{"name": c, "image": "ghcr.io/example/site:1"}
		if env != nil {
			ct["env"] = env
		}
		cs = append(cs, ct)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{"template": map[string]any{
			"metadata": map[string]any{"labels": map[string]any{"tier": "web"}},
			"spec": map[string]any{
				"containerConcurrency": int64(80),
				"timeoutSeconds":       int64(300),
				"containers":           cs,
			},
		}},
	}}
	u.SetGroupVersionKind(ksvcGVK)
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetAnnotations(annotations)
	u.SetLabels(labels)
	return u
}

func deployment(ns, name string, annotations, labels map[string]string, containers ...string) *appsv1.Deployment {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
			},
		},
	}
	for _, c := range containers {
		d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, corev1.Container{Name: c, Image: "ghcr.io/example/site:1"})
	}
	return d
}

// template reads back the stored pod template of a workload.
func template(t *testing.T, c client.Client, obj client.Object) *inject.Template {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(obj.GetObjectKind().GroupVersionKind())
	if u.GetKind() == "" {
		u.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("Deployment"))
	}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), u); err != nil {
		t.Fatalf("get %s: %v", obj.GetName(), err)
	}
	tpl, err := inject.ReadTemplate(u)
	if err != nil {
		t.Fatal(err)
	}
	return tpl
}

func container(t *testing.T, tpl *inject.Template, name string) corev1.Container {
	t.Helper()
	i := slices.IndexFunc(tpl.Containers, func(c corev1.Container) bool { return c.Name == name })
	if i < 0 {
		t.Fatalf("no container %q", name)
	}
	return tpl.Containers[i]
}

func envCount(c corev1.Container, name string) int {
	n := 0
	for _, e := range c.Env {
		if e.Name == name {
			n++
		}
	}
	return n
}

func env(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

// assertConfigMapInjection checks volume, mount, env, label and token, each exactly once.
func assertConfigMapInjection(t *testing.T, tpl *inject.Template, d *decov1.Decofile, containerName, mountPath, file string) {
	t.Helper()
	vols := 0
	for _, v := range tpl.Volumes {
		if v.Name == inject.VolumeName {
			vols++
			if v.ConfigMap == nil || v.ConfigMap.Name == "" || v.ConfigMap.Name != d.ConfigMapName() {
				t.Errorf("volume %q = %+v, want ConfigMap %q", v.Name, v.VolumeSource, d.ConfigMapName())
			}
		}
	}
	if vols != 1 {
		t.Errorf("%d decofile volumes, want 1", vols)
	}
	c := container(t, tpl, containerName)
	mounts := 0
	for _, m := range c.VolumeMounts {
		if m.Name == inject.VolumeName {
			mounts++
			if m.MountPath != mountPath || !m.ReadOnly {
				t.Errorf("mount = %+v, want read-only at %s", m, mountPath)
			}
		}
	}
	if mounts != 1 {
		t.Errorf("%d decofile mounts in %q, want 1", mounts, containerName)
	}
	if n := envCount(c, decov1.EnvRelease); n != 1 {
		t.Errorf("%d %s in %q, want 1", n, decov1.EnvRelease, containerName)
	}
	if e := env(c, decov1.EnvRelease); e == nil || e.Value != "file://"+mountPath+"/"+file {
		t.Errorf("%s = %+v, want file://%s/%s", decov1.EnvRelease, e, mountPath, file)
	}
	assertToken(t, c, d)
	if got := tpl.Labels[decov1.LabelDecofile]; got != d.Name {
		t.Errorf("pod label %s = %q, want %q", decov1.LabelDecofile, got, d.Name)
	}
	if got := tpl.Labels[decov1.LabelDeploymentID]; got != d.DeploymentIDOrName() {
		t.Errorf("pod label %s = %q, want %q", decov1.LabelDeploymentID, got, d.DeploymentIDOrName())
	}
}

func assertToken(t *testing.T, c corev1.Container, d *decov1.Decofile) {
	t.Helper()
	if n := envCount(c, decov1.EnvReloadToken); n != 1 {
		t.Errorf("%d %s, want 1", n, decov1.EnvReloadToken)
	}
	e := env(c, decov1.EnvReloadToken)
	if e == nil || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
		e.ValueFrom.SecretKeyRef.Name != d.ReloadSecretName() || e.ValueFrom.SecretKeyRef.Key != decov1.ReloadTokenKey {
		t.Errorf("%s = %+v, want a secretKeyRef to %s/%s", decov1.EnvReloadToken, e, d.ReloadSecretName(), decov1.ReloadTokenKey)
	}
}

func TestKnativeServiceInjectedFromConfigMap(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	ns := c.Namespace(t, "inject-ksvc", nil)
	d := decofile(t, c.Client, ns, "shop", "", "", decov1.FormatJSON)

	svc := ksvc(ns, "shop", map[string]string{decov1.AnnotationInject: "shop"}, nil, nil, "app")
	if err := c.Client.Create(ctx, svc); err != nil {
		t.Fatalf("create Knative Service: %v", err)
	}
	tpl := template(t, c.Client, svc)
	assertConfigMapInjection(t, tpl, d, "app", decov1.DefaultMountPath, decov1.KeyJSON)
	if tpl.Labels["tier"] != "web" {
		t.Errorf("existing pod label lost: %v", tpl.Labels)
	}

	// Knative's own revision fields survive the patch.
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(ksvcGVK)
	if err := c.Client.Get(ctx, client.ObjectKeyFromObject(svc), got); err != nil {
		t.Fatal(err)
	}
	if cc, _, _ := unstructured.NestedInt64(got.Object, "spec", "template", "spec", "containerConcurrency"); cc != 80 {
		t.Errorf("containerConcurrency = %d, want 80", cc)
	}
	if got.GetLabels()[decov1.LabelDecofile] != "shop" {
		t.Errorf("workload label %s = %q, want shop", decov1.LabelDecofile, got.GetLabels()[decov1.LabelDecofile])
	}
}

func TestDeploymentFormatMountPathAndContainer(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	ns := c.Namespace(t, "inject-deploy", nil)
	bin := decofile(t, c.Client, ns, "big", "", "", decov1.FormatBin)
	small := decofile(t, c.Client, ns, "small", "", "", decov1.FormatJSON)

	// .bin format, custom mount path, env into the container the annotation names.
	dep := deployment(ns, "big", map[string]string{
		decov1.AnnotationInject:    "big",
		decov1.AnnotationMountPath: "/srv/config",
		decov1.AnnotationContainer: "site",
	}, nil, "sidecar", "site")
	if err := c.Client.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	tpl := template(t, c.Client, dep)
	assertConfigMapInjection(t, tpl, bin, "site", "/srv/config", decov1.KeyBin)
	if side := container(t, tpl, "sidecar"); len(side.Env) != 0 || len(side.VolumeMounts) != 0 {
		t.Errorf("sidecar was changed: %+v", side)
	}

	// Default container "app" wins over the first one.
	dep2 := deployment(ns, "small", map[string]string{decov1.AnnotationInject: "small"}, nil, "proxy", "app")
	if err := c.Client.Create(ctx, dep2); err != nil {
		t.Fatal(err)
	}
	tpl = template(t, c.Client, dep2)
	assertConfigMapInjection(t, tpl, small, "app", decov1.DefaultMountPath, decov1.KeyJSON)

	// StatefulSets are injected too, into the first container when none is named app.
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "small-sts", Namespace: ns, Annotations: map[string]string{decov1.AnnotationInject: "small"}},
		Spec: appsv1.StatefulSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "sts"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "sts"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "x"}}},
			},
		},
	}
	if err := c.Client.Create(ctx, sts); err != nil {
		t.Fatal(err)
	}
	got := &appsv1.StatefulSet{}
	if err := c.Client.Get(ctx, client.ObjectKeyFromObject(sts), got); err != nil {
		t.Fatal(err)
	}
	if e := env(got.Spec.Template.Spec.Containers[0], decov1.EnvRelease); e == nil || e.Value != "file:///app/decofile/decofile.json" {
		t.Errorf("StatefulSet %s = %+v", decov1.EnvRelease, e)
	}
}

func TestResolutionModes(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	wc := newWarningClient(t, c)
	ns := c.Namespace(t, "sites-resolve", nil)
	main := decofile(t, c.Client, ns, inject.DefaultDecofileName(ns), "", "", decov1.FormatJSON)
	byID := decofile(t, c.Client, ns, "storefront-config", "storefront", "", decov1.FormatBin)
	named := decofile(t, c.Client, ns, "named", "", "", decov1.FormatJSON)

	cases := []struct {
		name, value string
		labels      map[string]string
		want        *decov1.Decofile
	}{
		{"default", inject.InjectDefault, nil, main},
		{"true", inject.InjectByDeploymentID, map[string]string{decov1.LabelDeploymentID: "storefront"}, byID},
		{"name", "named", nil, named},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			svc := ksvc(ns, "svc-"+tc.name, map[string]string{decov1.AnnotationInject: tc.value}, tc.labels, nil, "app")
			if err := wc.Create(ctx, svc); err != nil {
				t.Fatal(err)
			}
			if w := wc.Take(); len(w) != 0 {
				t.Errorf("unexpected warnings: %q", w)
			}
			tpl := template(t, c.Client, svc)
			if tpl.Labels[decov1.LabelDecofile] != tc.want.Name {
				t.Fatalf("injected %q, want %q", tpl.Labels[decov1.LabelDecofile], tc.want.Name)
			}
			file := decov1.KeyJSON
			if tc.want.Status.Format == decov1.FormatBin {
				file = decov1.KeyBin
			}
			assertConfigMapInjection(t, tpl, tc.want, "app", decov1.DefaultMountPath, file)
		})
	}

	t.Run("missing", func(t *testing.T) {
		warned := testutil.ToFloat64(inject.AdmissionsTotal.WithLabelValues("Service", inject.ResultWarned))
		defer func() {
			if got := testutil.ToFloat64(inject.AdmissionsTotal.WithLabelValues("Service", inject.ResultWarned)) - warned; got != 3 {
				t.Errorf("%s{result=warned} grew by %v, want 3", "siteops_decofile_injection_admissions_total", got)
			}
		}()
		for _, mc := range []struct {
			value, wantWarning string
			labels             map[string]string
		}{
			{"nope", `Decofile "nope" not found`, nil},
			{inject.InjectByDeploymentID, `no Decofile in namespace`, map[string]string{decov1.LabelDeploymentID: "unknown"}},
			{inject.InjectByDeploymentID, decov1.LabelDeploymentID, nil},
		} {
			svc := ksvc(ns, "", map[string]string{decov1.AnnotationInject: mc.value}, mc.labels, nil, "app")
			svc.SetGenerateName("missing-")
			if err := wc.Create(ctx, svc); err != nil {
				t.Fatalf("a workload with a missing Decofile must be admitted: %v", err)
			}
			w := wc.Take()
			if len(w) != 1 || !strings.Contains(w[0], mc.wantWarning) {
				t.Errorf("warnings = %q, want one containing %q", w, mc.wantWarning)
			}
			tpl := template(t, c.Client, svc)
			if len(tpl.Volumes) != 0 || len(tpl.Containers[0].Env) != 0 || tpl.Labels[decov1.LabelDecofile] != "" {
				t.Errorf("something was injected: %+v", tpl)
			}
		}
	})
}

func TestUnannotatedObjectsNeverReachTheWebhook(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	ns := c.Namespace(t, "inject-none", map[string]string{decov1.AnnotationValkeyACL: "true"})
	decofile(t, c.Client, ns, "site", "", "", decov1.FormatJSON)

	before := webhookCalls(t, inject.MutatePath)
	svc := ksvc(ns, "plain", map[string]string{"unrelated": "x"}, map[string]string{decov1.LabelDeploymentID: "site"}, nil, "app")
	if err := c.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	dep := deployment(ns, "plain", nil, nil, "app")
	if err := c.Client.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	dep.Spec.Template.Labels["rev"] = "2"
	if err := c.Client.Update(ctx, dep); err != nil {
		t.Fatal(err)
	}
	if after := webhookCalls(t, inject.MutatePath); after != before {
		t.Errorf("webhook called %v times for objects without the annotation, want 0", after-before)
	}
	if tpl := template(t, c.Client, svc); len(tpl.Volumes) != 0 || len(tpl.Containers[0].Env) != 0 || len(tpl.Containers[0].EnvFrom) != 0 {
		t.Errorf("unannotated Service changed: %+v", tpl)
	}

	// The counter is live: an annotated object is counted.
	annotated := ksvc(ns, "annotated", map[string]string{decov1.AnnotationInject: "site"}, nil, nil, "app")
	if err := c.Client.Create(ctx, annotated); err != nil {
		t.Fatal(err)
	}
	if after := webhookCalls(t, inject.MutatePath); after != before+1 {
		t.Errorf("webhook calls = %v, want %v", after, before+1)
	}
}

func TestS3TargetEnvAndAuthorities(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	ns := c.Namespace(t, "inject-s3", nil)
	d := decofile(t, c.Client, ns, "s3site", "shop", decov1.TargetS3, "")
	wantURL := "https://" + testS3.PublicHost + "/" + d.S3ObjectKey(testS3.Prefix)

	cases := []struct {
		name    string
		env     []any
		wantAut string
	}{
		{"unset", nil, decov1.DefaultAllowedAuthorities + "," + testS3.PublicHost},
		{"existing", []any{map[string]any{"name": decov1.EnvAllowedAuthorities, "value": "cdn.example.com"}}, "cdn.example.com," + testS3.PublicHost},
		{"present", []any{map[string]any{"name": decov1.EnvAllowedAuthorities, "value": "a.example.com," + testS3.PublicHost}}, "a.example.com," + testS3.PublicHost},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			svc := ksvc(ns, "s3-"+tc.name, map[string]string{decov1.AnnotationInject: "s3site"}, nil, tc.env, "app")
			if err := c.Client.Create(ctx, svc); err != nil {
				t.Fatal(err)
			}
			tpl := template(t, c.Client, svc)
			if len(tpl.Volumes) != 0 || len(tpl.Containers[0].VolumeMounts) != 0 {
				t.Errorf("s3 target must not mount anything: %+v", tpl)
			}
			app := container(t, tpl, "app")
			if e := env(app, decov1.EnvRelease); e == nil || e.Value != wantURL {
				t.Errorf("%s = %+v, want %s", decov1.EnvRelease, e, wantURL)
			}
			if n := envCount(app, decov1.EnvAllowedAuthorities); n != 1 {
				t.Errorf("%d %s, want 1", n, decov1.EnvAllowedAuthorities)
			}
			if e := env(app, decov1.EnvAllowedAuthorities); e == nil || e.Value != tc.wantAut {
				t.Errorf("%s = %+v, want %q", decov1.EnvAllowedAuthorities, e, tc.wantAut)
			}
			assertToken(t, app, d)
		})
	}
}

func TestValkeyEnvFromOnlyInAnnotatedNamespaces(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	optIn := c.Namespace(t, "valkey-on", map[string]string{decov1.AnnotationValkeyACL: "true"})
	optOut := c.Namespace(t, "valkey-off", nil)

	hasValkey := func(tpl *inject.Template) int {
		n := 0
		for _, e := range tpl.Containers[0].EnvFrom {
			if e.SecretRef != nil && e.SecretRef.Name == decov1.ValkeyACLSecretName && e.SecretRef.Optional != nil && *e.SecretRef.Optional {
				n++
			}
		}
		return n
	}
	for _, tc := range []struct {
		ns   string
		want int
	}{{optIn, 1}, {optOut, 0}} {
		decofile(t, c.Client, tc.ns, "site", "", "", decov1.FormatJSON)
		withDecofile := ksvc(tc.ns, "with-decofile", map[string]string{decov1.AnnotationInject: "site"}, nil, nil, "app")
		onlyValkey := deployment(tc.ns, "only-valkey", map[string]string{decov1.AnnotationValkeyACLInject: "true"}, nil, "app")
		for _, obj := range []client.Object{withDecofile, onlyValkey} {
			if err := c.Client.Create(ctx, obj); err != nil {
				t.Fatal(err)
			}
			if got := hasValkey(template(t, c.Client, obj)); got != tc.want {
				t.Errorf("%s/%s: %d valkey-acl envFrom, want %d", tc.ns, obj.GetName(), got, tc.want)
			}
		}
		if tpl := template(t, c.Client, onlyValkey); len(tpl.Volumes) != 0 || len(tpl.Containers[0].Env) != 0 {
			t.Errorf("valkey-only workload got a Decofile: %+v", tpl)
		}
	}
}

func TestReapplyChangesNothing(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	ns := c.Namespace(t, "inject-reapply", map[string]string{decov1.AnnotationValkeyACL: "true"})
	d := decofile(t, c.Client, ns, "site", "", "", decov1.FormatJSON)
	wc := newWarningClient(t, c)

	dep := deployment(ns, "site", map[string]string{decov1.AnnotationInject: "site"}, nil, "app")
	if err := wc.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	svc := ksvc(ns, "site", map[string]string{decov1.AnnotationInject: "site"}, nil, nil, "app")
	if err := wc.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	wc.Take()
	first := &appsv1.Deployment{}
	if err := c.Client.Get(ctx, client.ObjectKeyFromObject(dep), first); err != nil {
		t.Fatal(err)
	}
	firstSvc := template(t, c.Client, svc)

	// Apply the stored (already injected) objects again, as a controller or kubectl would.
	for i := 0; i < 2; i++ {
		again := first.DeepCopy()
		if err := wc.Update(ctx, again); err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(ksvcGVK)
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(svc), u); err != nil {
			t.Fatal(err)
		}
		if err := wc.Update(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	if w := wc.Take(); len(w) != 0 {
		t.Errorf("re-applying warned: %q", w)
	}
	final := &appsv1.Deployment{}
	if err := c.Client.Get(ctx, client.ObjectKeyFromObject(dep), final); err != nil {
		t.Fatal(err)
	}
	if final.Generation != first.Generation {
		t.Errorf("generation %d -> %d: the template changed", first.Generation, final.Generation)
	}
	if !equality.Semantic.DeepEqual(first.Spec.Template, final.Spec.Template) {
		t.Errorf("template changed:\nbefore %+v\nafter  %+v", first.Spec.Template, final.Spec.Template)
	}
	if got := template(t, c.Client, svc); !equality.Semantic.DeepEqual(firstSvc, got) {
		t.Errorf("Knative template changed:\nbefore %+v\nafter  %+v", firstSvc, got)
	}
	assertConfigMapInjection(t, template(t, c.Client, dep), d, "app", decov1.DefaultMountPath, decov1.KeyJSON)

	// A user-set DECO_RELEASE is replaced, with a warning naming it.
	edited := final.DeepCopy()
	for i, e := range edited.Spec.Template.Spec.Containers[0].Env {
		if e.Name == decov1.EnvRelease {
			edited.Spec.Template.Spec.Containers[0].Env[i].Value = "file:///elsewhere.json"
		}
	}
	if err := wc.Update(ctx, edited); err != nil {
		t.Fatal(err)
	}
	if w := wc.Take(); len(w) != 1 || !strings.Contains(w[0], "file:///elsewhere.json") {
		t.Errorf("warnings = %q, want one naming the replaced value", w)
	}
	if e := env(container(t, template(t, c.Client, dep), "app"), decov1.EnvRelease); e.Value != "file:///app/decofile/decofile.json" {
		t.Errorf("%s = %q after a user edit", decov1.EnvRelease, e.Value)
	}
}

func TestDecofileDeleteDeniedWhileReferenced(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	ns := c.Namespace(t, "inject-protect", nil)
	d := decofile(t, c.Client, ns, "site", "", "", decov1.FormatJSON)
	dep := deployment(ns, "site", map[string]string{decov1.AnnotationInject: "site"}, nil, "app")
	if err := c.Client.Create(ctx, dep); err != nil {
		t.Fatal(err)
	}
	svc := ksvc(ns, "site", map[string]string{decov1.AnnotationInject: "site"}, nil, nil, "app")
	if err := c.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}

	err := c.Client.Delete(ctx, d.DeepCopy())
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "deployment.apps/site") || !strings.Contains(err.Error(), "service.serving.knative.dev/site") {
		t.Fatalf("delete while referenced: err = %v, want denied naming both workloads", err)
	}

	// Removing the annotation strips the injection and the reference.
	stripped := testutil.ToFloat64(inject.AdmissionsTotal.WithLabelValues("Deployment", inject.ResultStripped))
	if err := c.Client.Get(ctx, client.ObjectKeyFromObject(dep), dep); err != nil {
		t.Fatal(err)
	}
	dep.Annotations = nil
	if err := c.Client.Update(ctx, dep); err != nil {
		t.Fatal(err)
	}
	tpl := template(t, c.Client, dep)
	if len(tpl.Volumes) != 0 || env(tpl.Containers[0], decov1.EnvRelease) != nil || tpl.Labels[decov1.LabelDecofile] != "" {
		t.Errorf("injection not stripped: %+v", tpl)
	}
	if got := testutil.ToFloat64(inject.AdmissionsTotal.WithLabelValues("Deployment", inject.ResultStripped)) - stripped; got != 1 {
		t.Errorf("stripped admissions grew by %v, want 1", got)
	}
	err = c.Client.Delete(ctx, d.DeepCopy())
	if !apierrors.IsForbidden(err) || strings.Contains(err.Error(), "deployment.apps/site") {
		t.Fatalf("delete with only the Service left: err = %v, want denied naming only the Service", err)
	}
	if err := c.Client.Delete(ctx, svc); err != nil {
		t.Fatal(err)
	}
	if err := c.Client.Delete(ctx, d.DeepCopy()); err != nil {
		t.Fatalf("delete after the last reference went: %v", err)
	}
}

func TestNotReadyDecofile(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	ns := c.Namespace(t, "inject-notready", nil)
	wc := newWarningClient(t, c)
	d := &decov1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: "fresh", Namespace: ns},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: &decov1.InlineSource{
			Value: map[string]apiextensionsv1.JSON{"home": {Raw: []byte(`{}`)}},
		}},
	}
	if err := c.Client.Create(ctx, d); err != nil {
		t.Fatal(err)
	}

	// No status, no ConfigMap, no reload Secret: admitted, injected as json, both named.
	dep := deployment(ns, "first", map[string]string{decov1.AnnotationInject: "fresh"}, nil, "app")
	if err := wc.Create(ctx, dep); err != nil {
		t.Fatalf("a workload of an unready Decofile must be admitted: %v", err)
	}
	w := strings.Join(wc.Take(), "\n")
	for _, want := range []string{`ConfigMap "decofile-fresh"`, `reload Secret "decofile-fresh-reload"`} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings %q do not name %s", w, want)
		}
	}
	if e := env(container(t, template(t, c.Client, dep), "app"), decov1.EnvRelease); e == nil || !strings.HasSuffix(e.Value, decov1.KeyJSON) {
		t.Errorf("%s = %+v", decov1.EnvRelease, e)
	}

	// The ConfigMap exists with .bin before status says so: its keys decide.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: d.ConfigMapName(), Namespace: ns}, Data: map[string]string{decov1.KeyBin: "x", decov1.KeyTimestamp: "1"}}
	if err := c.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	dep2 := deployment(ns, "second", map[string]string{decov1.AnnotationInject: "fresh"}, nil, "app")
	if err := wc.Create(ctx, dep2); err != nil {
		t.Fatal(err)
	}
	if e := env(container(t, template(t, c.Client, dep2), "app"), decov1.EnvRelease); e == nil || !strings.HasSuffix(e.Value, decov1.KeyBin) {
		t.Errorf("%s = %+v, want the .bin file the ConfigMap holds", decov1.EnvRelease, e)
	}

	// A Ready=False condition is passed on.
	meta := metav1.Condition{Type: decov1.ConditionReady, Status: metav1.ConditionFalse, Reason: decov1.ReasonTooLarge, Message: "too big for a ConfigMap", LastTransitionTime: metav1.Now()}
	d.Status.Conditions = []metav1.Condition{meta}
	if err := c.Client.Status().Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	wc.Take()
	dep3 := deployment(ns, "third", map[string]string{decov1.AnnotationInject: "fresh"}, nil, "app")
	if err := wc.Create(ctx, dep3); err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(wc.Take(), "\n"); !strings.Contains(w, "too big for a ConfigMap") {
		t.Errorf("warnings %q do not pass on the Ready condition", w)
	}
}

func TestS3NotConfiguredAdmitsWithWarning(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	ns := c.Namespace(t, "inject-nos3", nil)
	decofile(t, c.Client, ns, "s3site", "", decov1.TargetS3, "")
	h := &inject.Injector{Reader: c.Client} // no S3 configuration
	dep := deployment(ns, "site", map[string]string{decov1.AnnotationInject: "s3site"}, nil, "app")
	raw, err := json.Marshal(dep)
	if err != nil {
		t.Fatal(err)
	}
	resp := h.Handle(ctx, admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Namespace: ns, Name: "site",
		Kind:   metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
		Object: runtime.RawExtension{Raw: raw},
	}})
	if !resp.Allowed {
		t.Fatalf("denied: %+v", resp.Result)
	}
	if len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "no S3 public host") {
		t.Errorf("warnings = %q", resp.Warnings)
	}
	for _, p := range resp.Patches {
		if s, _ := json.Marshal(p.Value); strings.Contains(string(s), `"name":"`+decov1.EnvRelease+`"`) {
			t.Errorf("patch sets %s without an S3 host: %s", decov1.EnvRelease, s)
		}
	}
}

func TestDecofileDeleteAllowedInTerminatingNamespace(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	ns := c.Namespace(t, "inject-terminating", nil)
	d := decofile(t, c.Client, ns, "site", "", "", decov1.FormatJSON)
	if err := c.Client.Create(ctx, deployment(ns, "site", map[string]string{decov1.AnnotationInject: "site"}, nil, "app")); err != nil {
		t.Fatal(err)
	}
	if err := c.Client.Delete(ctx, d.DeepCopy()); !apierrors.IsForbidden(err) {
		t.Fatalf("delete while referenced: %v, want denied", err)
	}
	// envtest runs no namespace controller: the namespace stays Terminating, as while the
	// real controller works through its content.
	if err := c.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Client.Delete(ctx, d.DeepCopy()); err != nil {
		t.Fatalf("delete in a terminating namespace: %v, want allowed", err)
	}
}

// TestServerSideReapply re-applies the original manifests with server-side apply, as Flux does on
// every reconcile: the injected fields are not in the manifest, yet the stored template and the
// generation stay the same (no new ReplicaSet, no new Knative Revision).
func TestServerSideReapply(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	ns := c.Namespace(t, "inject-ssa", map[string]string{decov1.AnnotationValkeyACL: "true"})
	decofile(t, c.Client, ns, "site", "", "", decov1.FormatBin)

	dep := deployment(ns, "site", map[string]string{decov1.AnnotationInject: "site"}, nil, "app")
	dep.SetGroupVersionKind(appsv1.SchemeGroupVersion.WithKind("Deployment"))
	depU, err := runtime.DefaultUnstructuredConverter.ToUnstructured(dep)
	if err != nil {
		t.Fatal(err)
	}
	manifests := []*unstructured.Unstructured{
		{Object: depU},
		ksvc(ns, "site", map[string]string{decov1.AnnotationInject: "site"}, nil, nil, "app"),
	}
	apply := func(u *unstructured.Unstructured) *unstructured.Unstructured {
		t.Helper()
		obj := u.DeepCopy()
		unstructured.RemoveNestedField(obj.Object, "status")
		unstructured.RemoveNestedField(obj.Object, "metadata", "creationTimestamp")
		if err := c.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner("flux"), client.ForceOwnership); err != nil {
			t.Fatalf("server-side apply %s: %v", u.GetKind(), err)
		}
		return obj
	}
	for _, m := range manifests {
		first := apply(m)
		tpl1, err := inject.ReadTemplate(first)
		if err != nil {
			t.Fatal(err)
		}
		if !inject.Injected(tpl1, "site") {
			t.Fatalf("%s not injected on first apply", m.GetKind())
		}
		second := apply(m)
		tpl2, _ := inject.ReadTemplate(second)
		if !equality.Semantic.DeepEqual(tpl1, tpl2) {
			t.Errorf("%s template changed on re-apply:\nbefore %+v\nafter  %+v", m.GetKind(), tpl1, tpl2)
		}
		if first.GetGeneration() != second.GetGeneration() {
			t.Errorf("%s generation %d -> %d on re-apply", m.GetKind(), first.GetGeneration(), second.GetGeneration())
		}
	}
}
