package controller_test

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/decofile/encode"
)

// reader is a Deployment whose pods load file (decofile.json or decofile.bin) at start.
func reader(t *testing.T, e *env, ns, name string, labels map[string]string, file string) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "site:1",
					Env: []corev1.EnvVar{{Name: decov1.EnvRelease, Value: "file://" + decov1.DefaultMountPath + "/" + file}}}}},
			},
		},
	}
	e.create(t, d)
	return d
}

func setInline(values map[string]string) func(*decov1.Decofile) {
	return func(d *decov1.Decofile) { d.Spec.Inline = inline(values) }
}

// TestFormatStaysWhileWorkloadsReadIt: the key a workload's DECO_RELEASE names is never taken
// away by a format switch. A v0.11 site (decofile.bin for small content, its Deployment found by
// app.deco/deploymentId) stays .bin after a change; once no workload reads .bin, small content
// goes back to .json. A siteops site reading .json stays .json past the compression threshold
// while the JSON fits, and when it no longer fits is stored as .bin with a Warning naming the
// workloads to re-apply.
func TestFormatStaysWhileWorkloadsReadIt(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	ns := e.c.Namespace(t, "format-readers", nil)

	v1 := map[string]string{"home": `{"title":"Home"}`}
	df := e.beforeV011ConfigMap(t, ns, "legacy", v1)
	if err := e.c.Client.Create(ctx, v011ConfigMap(t, df, `{"home":{"title":"Home"}}`, true)); err != nil {
		t.Fatal(err)
	}
	site := reader(t, e, ns, "legacy-site", map[string]string{decov1.LabelDeploymentID: "legacy"}, decov1.KeyBin)
	e.update(t, ns, "legacy", func(d *decov1.Decofile) { d.Spec.Target = decov1.TargetConfigMap })
	e.waitReady(t, ns, "legacy", metav1.ConditionTrue, decov1.ReasonSucceeded, func(d *decov1.Decofile) error {
		if d.Status.StoredHash == "" {
			return errorf("not adopted yet")
		}
		return nil
	})

	v2 := map[string]string{"home": `{"title":"Home 2"}`}
	e.update(t, ns, "legacy", setInline(v2))
	got := e.waitReady(t, ns, "legacy", metav1.ConditionTrue, decov1.ReasonSucceeded, func(d *decov1.Decofile) error {
		if d.Status.ContentHash != encode.Hash(mergedOf(t, v2)) {
			return errorf("new content not stored yet")
		}
		return nil
	})
	cm := e.configMap(t, ns, "legacy")
	if got.Status.Format != decov1.FormatBin || cm.Data[decov1.KeyBin] == "" {
		t.Fatalf("small content moved off decofile.bin while %s reads it: format %s, keys %v", site.Name, got.Status.Format, keys(cm.Data))
	}
	if raw, err := encode.Decode(decov1.FormatBin, cm.Data[decov1.KeyBin], 1<<20); err != nil || string(raw) != string(mergedOf(t, v2)) {
		t.Fatalf("decofile.bin does not hold the new content: %q %v", raw, err)
	}

	if err := e.c.Client.Delete(ctx, site); err != nil {
		t.Fatal(err)
	}
	v3 := map[string]string{"home": `{"title":"Home 3"}`}
	e.update(t, ns, "legacy", setInline(v3))
	e.waitReady(t, ns, "legacy", metav1.ConditionTrue, decov1.ReasonSucceeded, func(d *decov1.Decofile) error {
		if d.Status.ContentHash != encode.Hash(mergedOf(t, v3)) || d.Status.Format != decov1.FormatJSON {
			return errorf("small content not back on decofile.json: %s", d.Status.Format)
		}
		return nil
	})

	// siteops' own json → bin switch across the threshold.
	e.create(t, &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: "growing", Namespace: ns},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: inline(v1)}})
	e.waitReady(t, ns, "growing", metav1.ConditionTrue, decov1.ReasonSucceeded, nil)
	reader(t, e, ns, "growing-site", map[string]string{decov1.LabelDecofile: "growing"}, decov1.KeyJSON)

	aboveThreshold := map[string]string{"blob": `"` + strings.Repeat("a", testThreshold*2) + `"`}
	e.update(t, ns, "growing", setInline(aboveThreshold))
	e.waitReady(t, ns, "growing", metav1.ConditionTrue, decov1.ReasonSucceeded, func(d *decov1.Decofile) error {
		if d.Status.ContentHash != encode.Hash(mergedOf(t, aboveThreshold)) {
			return errorf("not stored yet")
		}
		if d.Status.Format != decov1.FormatJSON {
			return errorf("moved to %s while a workload reads decofile.json and the JSON fits", d.Status.Format)
		}
		return nil
	})

	tooBigForJSON := map[string]string{"blob": `"` + strings.Repeat("b", testLimit) + `"`}
	e.update(t, ns, "growing", setInline(tooBigForJSON))
	e.waitReady(t, ns, "growing", metav1.ConditionTrue, decov1.ReasonSucceeded, func(d *decov1.Decofile) error {
		if d.Status.ContentHash != encode.Hash(mergedOf(t, tooBigForJSON)) || d.Status.Format != decov1.FormatBin {
			return errorf("not stored as bin yet: %s", d.Status.Format)
		}
		return nil
	})
	e.hasEvent(t, ns, "growing", corev1.EventTypeWarning, controller.ReasonFormatSwitched, "deployment/growing-site")
}
