package controller_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/decofile/encode"
)

// v011ConfigMap is a ConfigMap as the published operator (v0.11) writes it: decofile.bin
// (base64 of brotli quality 5, whatever the size) of its own JSON rendering, and timestamp.txt;
// no siteops annotations.
func v011ConfigMap(t *testing.T, df *decov1.Decofile, json string, owned bool) *corev1.ConfigMap {
	t.Helper()
	bin, err := encode.Compress([]byte(json), encode.Level{Quality: 5})
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: df.ConfigMapName(), Namespace: df.Namespace},
		Data:       map[string]string{decov1.KeyBin: bin, decov1.KeyTimestamp: "1764547200"},
	}
	if owned {
		cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: decov1.GroupVersion.String(), Kind: "Decofile", Name: df.Name, UID: df.UID, Controller: ptr.To(true)}}
	}
	return cm
}

// TestAdoptV011ConfigMap: a Decofile whose ConfigMap was written by v0.11 with the same content
// (another JSON rendering, stored as .bin) is adopted without rewriting the data: the stored
// bytes and timestamp stay, status records them (format bin, storedHash of those bytes), and the
// next reconcile finds it intact. With other content, or owned by nobody and different, it is
// not adopted.
func TestAdoptV011ConfigMap(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	ns := e.c.Namespace(t, "v011-adopt", nil)
	values := map[string]string{"home": `{"title":"Home","sections":[1,2]}`, "footer": `{"links":["a"]}`}
	v011JSON := "{\n  \"home\": {\"sections\": [1, 2], \"title\": \"Home\"},\n  \"footer\": {\"links\": [\"a\"]}\n}"

	for _, owned := range []bool{true, false} {
		name := map[bool]string{true: "owned", false: "unowned"}[owned]
		df := e.beforeV011ConfigMap(t, ns, name, values)
		cm := v011ConfigMap(t, df, v011JSON, owned)
		if err := e.c.Client.Create(ctx, cm); err != nil {
			t.Fatalf("%s: create v0.11 ConfigMap: %v", name, err)
		}
		e.update(t, ns, name, func(d *decov1.Decofile) { d.Spec.Target = decov1.TargetConfigMap })
		got := e.waitReady(t, ns, name, metav1.ConditionTrue, decov1.ReasonSucceeded, func(d *decov1.Decofile) error {
			if d.Status.StoredHash == "" {
				return errorf("not stored yet")
			}
			return nil
		})
		after := e.configMap(t, ns, name)
		if after.Data[decov1.KeyBin] != cm.Data[decov1.KeyBin] || after.Data[decov1.KeyTimestamp] != "1764547200" || len(after.Data) != 2 {
			t.Fatalf("%s: ConfigMap data was rewritten: %v", name, keys(after.Data))
		}
		if got.Status.Format != decov1.FormatBin || got.Status.Timestamp != 1764547200 || got.Status.ContentHash != encode.Hash(mergedOf(t, values)) ||
			after.Annotations[controller.AnnotationStoredHash] != got.Status.StoredHash {
			t.Fatalf("%s: status after adoption: %+v", name, got.Status)
		}
		e.hasEvent(t, ns, name, corev1.EventTypeNormal, controller.ReasonConfigMapAdopted, "kept its data")
		if owner := metav1.GetControllerOf(after); owner == nil || owner.UID != got.UID {
			t.Fatalf("%s: adopted ConfigMap not owned by the Decofile: %+v", name, after.OwnerReferences)
		}
		// Adopted means intact: another reconcile writes nothing.
		rv := after.ResourceVersion
		e.poke(t, ns, name)
		e.waitReady(t, ns, name, metav1.ConditionTrue, decov1.ReasonSucceeded, nil)
		if again := e.configMap(t, ns, name); again.ResourceVersion != rv {
			t.Fatalf("%s: adopted ConfigMap written again", name)
		}
	}

	// Different content in an owned ConfigMap: rewritten from the source.
	df := e.beforeV011ConfigMap(t, ns, "stale", values)
	if err := e.c.Client.Create(ctx, v011ConfigMap(t, df, `{"home":{"title":"Old"}}`, true)); err != nil {
		t.Fatal(err)
	}
	e.update(t, ns, "stale", func(d *decov1.Decofile) { d.Spec.Target = decov1.TargetConfigMap })
	got := e.waitReady(t, ns, "stale", metav1.ConditionTrue, decov1.ReasonSucceeded, func(d *decov1.Decofile) error {
		if d.Status.Timestamp == 1764547200 || d.Status.StoredHash == "" {
			return errorf("not rewritten yet: %+v", d.Status)
		}
		return nil
	})
	if strings.HasPrefix(ready(got).Message, "adopted") {
		t.Fatalf("different content adopted: %q", ready(got).Message)
	}

	// Different content in a ConfigMap nobody owns: still a conflict, left alone.
	df = e.beforeV011ConfigMap(t, ns, "foreign", values)
	foreign := v011ConfigMap(t, df, `{"home":{"title":"Other"}}`, false)
	if err := e.c.Client.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	e.update(t, ns, "foreign", func(d *decov1.Decofile) { d.Spec.Target = decov1.TargetConfigMap })
	e.waitReady(t, ns, "foreign", metav1.ConditionFalse, controller.ReasonConfigMapConflict, nil)
	if cm := e.configMap(t, ns, "foreign"); cm.Data[decov1.KeyBin] != foreign.Data[decov1.KeyBin] {
		t.Fatal("a ConfigMap owned by nobody with other content was overwritten")
	}
}

// beforeV011ConfigMap creates an inline Decofile that the controller cannot store yet (target s3,
// which these tests' operator does not have), so a ConfigMap shaped like v0.11's can be put in
// place before the first delivery, as a migration finds it. Switching the target to configmap
// then delivers.
func (e *env) beforeV011ConfigMap(t *testing.T, ns, name string, values map[string]string) *decov1.Decofile {
	t.Helper()
	e.create(t, &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: inline(values), Target: decov1.TargetS3}})
	return e.waitReady(t, ns, name, metav1.ConditionFalse, controller.ReasonS3NotConfigured, nil)
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
