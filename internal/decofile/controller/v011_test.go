package controller_test

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/testenv"
)

// v011KV is a Decofile as the published Decofile operator (v0.11) writes one for its
// tanstack-kv target.
func v011KV(ns, name string) *decov1.Decofile {
	return &decov1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: decov1.DecofileSpec{
			Source:     decov1.SourceGitHub,
			GitHub:     &decov1.GitHubSource{Org: "deco-sites", Repo: "storefront", Commit: "main", Path: ".deco/blocks"},
			Target:     decov1.TargetTanStackKV,
			TanStackKV: &decov1.TanStackKVTarget{KVNamespaceID: "0123abcd", SiteOrigin: "https://shop.example"},
		},
	}
}

// TestTanStackKVLeftAlone: a tanstack-kv Decofile written by v0.11 is accepted with every field,
// kept as written, and left alone — its ConfigMap is not touched, no reload Secret is made —
// with Ready=False TargetNotSupported naming the operator that serves it, and Stalled=True.
func TestTanStackKVLeftAlone(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	ns := e.c.Namespace(t, "v011-kv", nil)
	df := v011KV(ns, "shop")
	e.create(t, df)

	// What v0.11 left behind: its ConfigMap (owned by the Decofile) and its status.
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "decofile-shop", Namespace: ns, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: decov1.GroupVersion.String(), Kind: "Decofile", Name: df.Name, UID: df.UID, Controller: ptr.To(true)}}},
		Data: map[string]string{decov1.KeyBin: "G/8AAIyUoiU=", decov1.KeyTimestamp: "1764547200"},
	}
	e.create(t, cm)
	// v0.11 wrote its status long before siteops ran; here siteops already runs, so its first
	// status write is awaited first, or it could land between the two and hide v0.11's fields.
	e.waitReady(t, ns, "shop", metav1.ConditionFalse, decov1.ReasonTargetNotSupported, nil)
	updated := metav1.NewTime(time.Unix(1764547200, 0))
	testenv.Eventually(t, waitFor, func() error {
		cur := e.get(t, ns, "shop")
		cur.Status.JobName = "shop-kv-sync-1764547200"
		cur.Status.LastUpdated = &updated
		cur.Status.ContentHash = "v011hash"
		meta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{Type: decov1.ConditionReady, Status: metav1.ConditionTrue, Reason: "ConfigMapCreated", Message: "by v0.11"})
		return e.c.Client.Status().Update(ctx, cur)
	})
	e.poke(t, ns, "shop")

	got := e.waitReady(t, ns, "shop", metav1.ConditionFalse, decov1.ReasonTargetNotSupported, nil)
	if c := ready(got); !strings.Contains(c.Message, "v0.11") || !strings.Contains(c.Message, "tanstack-kv") {
		t.Fatalf("Ready message does not say which operator serves tanstack-kv: %q", c.Message)
	}
	if !meta.IsStatusConditionTrue(got.Status.Conditions, decov1.ConditionStalled) {
		t.Fatalf("want Stalled=True: %+v", got.Status.Conditions)
	}
	if kv := got.Spec.TanStackKV; got.Spec.Target != decov1.TargetTanStackKV || kv == nil || kv.KVNamespaceID != "0123abcd" || kv.SiteOrigin != "https://shop.example" {
		t.Fatalf("spec not preserved: %+v", got.Spec)
	}
	if got.Status.JobName != "shop-kv-sync-1764547200" || got.Status.LastUpdated == nil || !got.Status.LastUpdated.Equal(&updated) || got.Status.ContentHash != "v011hash" {
		t.Fatalf("status written by v0.11 not preserved: %+v", got.Status)
	}
	after := e.configMap(t, ns, "shop")
	if after.ResourceVersion != cm.ResourceVersion {
		t.Fatalf("ConfigMap was written: resourceVersion %s → %s, data %v", cm.ResourceVersion, after.ResourceVersion, after.Data)
	}
	var s corev1.Secret
	if err := e.c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: df.ReloadSecretName()}, &s); !apierrors.IsNotFound(err) {
		t.Fatalf("reload Secret for a Decofile siteops does not serve: err %v", err)
	}
	e.hasEvent(t, ns, "shop", corev1.EventTypeWarning, decov1.ReasonTargetNotSupported, "v0.11")

	// Switched to a target siteops serves, it is delivered.
	e.update(t, ns, "shop", func(d *decov1.Decofile) {
		d.Spec.Target, d.Spec.TanStackKV = decov1.TargetConfigMap, nil
		d.Spec.Source, d.Spec.GitHub, d.Spec.Inline = decov1.SourceInline, nil, inline(map[string]string{"a": `1`})
	})
	e.waitReady(t, ns, "shop", metav1.ConditionTrue, decov1.ReasonSucceeded, nil)
}

// TestTanStackKVValidation: the CRD has v0.11's rule — tanstack-kv needs spec.tanstackKV with a
// kvNamespaceId and a github source.
func TestTanStackKVValidation(t *testing.T) {
	e := start(t)
	ns := e.c.Namespace(t, "v011-kv-rules", nil)
	for name, change := range map[string]func(*decov1.Decofile){
		"no-tanstackkv": func(d *decov1.Decofile) { d.Spec.TanStackKV = nil },
		"inline": func(d *decov1.Decofile) {
			d.Spec.Source, d.Spec.GitHub, d.Spec.Inline = decov1.SourceInline, nil, inline(map[string]string{"a": `1`})
		},
		"empty-namespace-id": func(d *decov1.Decofile) { d.Spec.TanStackKV.KVNamespaceID = "" },
	} {
		df := v011KV(ns, name)
		change(df)
		err := e.c.Client.Create(context.Background(), df)
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s: want Invalid, got %v", name, err)
		}
	}
}

// TestFirstDeliveryRestartsNothing: a Decofile siteops has not delivered yet, whose status already
// has an observedGeneration (written by v0.11, or by siteops for a tanstack-kv Decofile), gets its
// reload Secret on its first delivery without restarting the workloads labelled with it: nothing
// running holds an earlier token of ours, and a restart is a new Knative Revision.
func TestFirstDeliveryRestartsNothing(t *testing.T) {
	e := start(t)
	ns := e.c.Namespace(t, "v011-first", nil)
	e.create(t, v011KV(ns, "shop"))
	w := workload(ns, "shop-web", "shop")
	e.create(t, w)
	if got := e.waitReady(t, ns, "shop", metav1.ConditionFalse, decov1.ReasonTargetNotSupported, nil); got.Status.ObservedGeneration == 0 {
		t.Fatal("want an observedGeneration before the first delivery")
	}
	e.update(t, ns, "shop", func(d *decov1.Decofile) {
		d.Spec.Target, d.Spec.TanStackKV = decov1.TargetConfigMap, nil
		d.Spec.Source, d.Spec.GitHub, d.Spec.Inline = decov1.SourceInline, nil, inline(map[string]string{"a": `1`})
	})
	df := e.waitReady(t, ns, "shop", metav1.ConditionTrue, decov1.ReasonSucceeded, nil)
	var s corev1.Secret
	if err := e.c.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: df.ReloadSecretName()}, &s); err != nil {
		t.Fatalf("reload Secret: %v", err)
	}
	e.poke(t, ns, "shop")
	e.waitReady(t, ns, "shop", metav1.ConditionTrue, decov1.ReasonSucceeded, nil)
	var d appsv1.Deployment
	if err := e.c.Client.Get(context.Background(), client.ObjectKeyFromObject(w), &d); err != nil {
		t.Fatal(err)
	}
	if at := d.Spec.Template.Annotations[controller.AnnotationRestartedAt]; at != "" {
		t.Fatalf("workload restarted on the first delivery (restartedAt %s)", at)
	}
}
