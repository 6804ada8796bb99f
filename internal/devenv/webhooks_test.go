package devenv_test

import (
	"context"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/inject"
)

// TestDevEnvInjectsDecofiles: `siteops dev up` registers the webhooks with the local API server
// and serves them with its own CA, so an annotated Deployment is injected there.
func TestDevEnvInjectsDecofiles(t *testing.T) {
	ctx := context.Background()
	c := devEnv(t).Client

	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := c.Get(ctx, client.ObjectKey{Name: inject.MutatingConfigName}, mwc); err != nil {
		t.Fatal(err)
	}
	if len(mwc.Webhooks[0].ClientConfig.CABundle) == 0 {
		t.Fatal("caBundle of the mutating webhook not set")
	}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sites-dev"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	d := &decov1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: "decofile-dev-main", Namespace: ns.Name},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: &decov1.InlineSource{
			Value: map[string]apiextensionsv1.JSON{"home": {Raw: []byte(`{}`)}},
		}},
	}
	if err := c.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: ns.Name, Annotations: map[string]string{decov1.AnnotationInject: inject.InjectDefault}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "site"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "site"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "site"}}},
			},
		},
	}
	if err := c.Create(ctx, dep); err != nil {
		t.Fatalf("create Deployment: %v", err)
	}
	if got := dep.Spec.Template.Labels[decov1.LabelDecofile]; got != d.Name {
		t.Errorf("pod label %s = %q, want %q (not injected)", decov1.LabelDecofile, got, d.Name)
	}
	if len(dep.Spec.Template.Spec.Volumes) != 1 || dep.Spec.Template.Spec.Volumes[0].ConfigMap == nil || dep.Spec.Template.Spec.Volumes[0].ConfigMap.Name != d.ConfigMapName() {
		t.Errorf("volumes = %+v", dep.Spec.Template.Spec.Volumes)
	}

	// The delete protection works without Knative installed (its Service kind is skipped).
	err := c.Delete(ctx, d)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "deployment.apps/site") {
		t.Errorf("delete of a referenced Decofile: %v, want denied naming deployment.apps/site", err)
	}
}
