package controller

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/sources"
	"github.com/siteops/siteops/internal/testenv"
)

// cacheWithoutConfigMaps is a manager cache that has not seen any ConfigMap yet: its metadata
// reads of ConfigMaps find nothing; everything else goes to the API server.
type cacheWithoutConfigMaps struct{ client.Client }

func (c cacheWithoutConfigMaps) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok && m.GroupVersionKind().Kind == "ConfigMap" {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, key.Name)
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// configMapReads counts the ConfigMaps read from the API server.
type configMapReads struct {
	client.Reader
	n int
}

func (r *configMapReads) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.ConfigMap); ok {
		r.n++
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

// TestConfigMapTheCacheHasNotSeen: a ConfigMap the manager's cache does not have yet is created
// without a read; when it exists after all, the create's AlreadyExists sends the delivery back to
// read it, so it is judged as if it had been read first: someone else's is a conflict and left
// unchanged, a v0.11 one with the same content is adopted, and none is created.
func TestConfigMapTheCacheHasNotSeen(t *testing.T) {
	c := testenv.APIServer(t)
	ctx := context.Background()
	ns := c.Namespace(t, "cm-cache", nil)
	reads := &configMapReads{Reader: c.Client}
	r := &Reconciler{client: cacheWithoutConfigMaps{c.Client}, reader: reads, now: time.Now, memory: newMemory(64 << 20), sources: sources.Describing}
	content := `{"title":"Home"}`

	newDecofile := func(name string) *decov1.Decofile {
		df := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: decov1.DecofileSpec{
			Source: decov1.SourceInline, Inline: &decov1.InlineSource{Value: map[string]apiextensionsv1.JSON{"home": {Raw: json.RawMessage(content)}}}}}
		if err := c.Client.Create(ctx, df); err != nil {
			t.Fatal(err)
		}
		return df
	}
	existing := func(df *decov1.Decofile, data string) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: df.ConfigMapName()},
			Data: map[string]string{decov1.KeyJSON: data, decov1.KeyTimestamp: "1764547200"}}
		if err := c.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		return cm
	}

	// Someone else's ConfigMap: a conflict, as when read first, and not touched.
	other := newDecofile("other")
	cm := existing(other, `{"home":{"title":"Someone else's"}}`)
	out := r.deliver(ctx, other, other.Status.DeepCopy())
	if out.reason != ReasonConfigMapConflict {
		t.Fatalf("with someone else's ConfigMap the cache has not seen: reason %q (%v), want %s", out.reason, out.err, ReasonConfigMapConflict)
	}
	var after corev1.ConfigMap
	if err := c.Client.Get(ctx, client.ObjectKeyFromObject(cm), &after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != cm.ResourceVersion {
		t.Fatal("someone else's ConfigMap was written")
	}
	if reads.n != 1 {
		t.Fatalf("someone else's ConfigMap read %d times, want once, after the create met it", reads.n)
	}

	// A v0.11 ConfigMap with this very content: adopted.
	same := newDecofile("same")
	merged, err := encode.Merge(map[string]json.RawMessage{"home": json.RawMessage(content)})
	if err != nil {
		t.Fatal(err)
	}
	existing(same, string(merged))
	next := same.Status.DeepCopy()
	if out := r.deliver(ctx, same, next); out.err != nil || !out.adopted {
		t.Fatalf("with a v0.11 ConfigMap holding the content: adopted %v, err %v", out.adopted, out.err)
	}
	if next.Timestamp != 1764547200 || next.StoredHash == "" {
		t.Fatalf("status after adoption: timestamp %d, storedHash %q", next.Timestamp, next.StoredHash)
	}

	// None at all: created, without a read.
	fresh := newDecofile("fresh")
	reads.n = 0
	if out := r.deliver(ctx, fresh, fresh.Status.DeepCopy()); out.err != nil || !out.changed {
		t.Fatalf("without a ConfigMap: changed %v, err %v", out.changed, out.err)
	}
	if reads.n != 0 {
		t.Fatalf("without a ConfigMap: read it %d times from the API server, want none", reads.n)
	}
}

// TestBusyRetrievalReadsNothing: a remote Decofile that finds every retrieval slot taken is
// sent back to wait before anything is read, so the Decofiles waiting behind a hanging host,
// each looking again about once a second, cost the API server no ConfigMap reads. Inline
// content needs no slot and is delivered meanwhile.
func TestBusyRetrievalReadsNothing(t *testing.T) {
	c := testenv.APIServer(t)
	ctx := context.Background()
	ns := c.Namespace(t, "busy-slots", nil)
	reads := &configMapReads{Reader: c.Client}
	r := &Reconciler{client: c.Client, reader: reads, now: time.Now, memory: newMemory(64 << 20), retrievals: make(chan struct{}, 1), sources: sources.Describing}
	r.retrievals <- struct{}{} // a hanging retrieval holds the only slot

	remote := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "remote"}, Spec: decov1.DecofileSpec{
		Source: decov1.SourceGit, Git: &decov1.GitSource{URL: "http://127.0.0.1:1/site.git", Ref: "main", Path: "blocks"}}}
	if err := c.Client.Create(ctx, remote); err != nil {
		t.Fatal(err)
	}
	// Delivered before: its ConfigMap exists, as for any site polled for a new commit.
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: remote.ConfigMapName(),
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(remote, decov1.GroupVersion.WithKind("Decofile"))}},
		Data: map[string]string{decov1.KeyJSON: `{}`, decov1.KeyTimestamp: "1764547200"}}
	if err := c.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if out := r.deliver(ctx, remote, remote.Status.DeepCopy()); !out.busy || out.err != nil {
		t.Fatalf("with every slot taken: busy %v, err %v; want busy", out.busy, out.err)
	}
	if reads.n != 0 {
		t.Fatalf("a Decofile waiting for a slot read %d ConfigMaps from the API server, want none", reads.n)
	}
	inline := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "inline"}, Spec: decov1.DecofileSpec{
		Source: decov1.SourceInline, Inline: &decov1.InlineSource{Value: map[string]apiextensionsv1.JSON{"home": {Raw: json.RawMessage(`{"title":"Home"}`)}}}}}
	if err := c.Client.Create(ctx, inline); err != nil {
		t.Fatal(err)
	}
	if out := r.deliver(ctx, inline, inline.Status.DeepCopy()); out.busy || out.err != nil || !out.changed {
		t.Fatalf("inline content while the slot is taken: busy %v, changed %v, err %v", out.busy, out.changed, out.err)
	}
	if len(r.retrievals) != 1 {
		t.Fatalf("%d slots taken after the deliveries, want only the hanging one", len(r.retrievals))
	}
}
