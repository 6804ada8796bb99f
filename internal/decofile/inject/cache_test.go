package inject_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/decofile/inject"
	"github.com/siteops/siteops/internal/testenv"
)

// countingReader reads the API server and counts what it was asked for, by kind of object, and
// the most reads it had in flight at once.
type countingReader struct {
	client.Reader
	mu       sync.Mutex
	reads    map[string]int
	inflight int
	most     int
}

// begin counts a read in flight, unless it is of a namespace (the webhook does not bound those).
func (r *countingReader) begin(obj runtime.Object) func() {
	if _, ok := obj.(*corev1.Namespace); ok {
		return func() {}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inflight++
	r.most = max(r.most, r.inflight)
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.inflight--
	}
}

func (r *countingReader) count(obj runtime.Object) {
	kind := fmt.Sprintf("%T", obj)
	switch obj.(type) {
	case *metav1.PartialObjectMetadata, *metav1.PartialObjectMetadataList:
		kind += "/" + obj.GetObjectKind().GroupVersionKind().Kind
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads[kind]++
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.count(obj)
	defer r.begin(obj)()
	return r.Reader.Get(ctx, key, obj, opts...)
}

func (r *countingReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	r.count(list)
	defer r.begin(list)()
	return r.Reader.List(ctx, list, opts...)
}

// Take returns the reads counted since the last call.
func (r *countingReader) Take() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.reads
	r.reads = map[string]int{}
	return out
}

// startCache starts a cache as the manager command configures it (Decofiles without inline
// content), with the deploymentId index and Secrets' metadata, and waits until it synced. stop
// ends its watches: from then on it knows nothing newer, as a cache that has not caught up.
func startCache(t *testing.T, c *testenv.Cluster) (cache.Cache, func()) {
	t.Helper()
	co := cache.Options{Scheme: c.Scheme, DefaultTransform: cache.TransformStripManagedFields()}
	controller.CacheOptions(&co)
	ca, err := cache.New(c.Config, co)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := ca.IndexField(ctx, &decov1.Decofile{}, inject.IndexDeploymentID, inject.DeploymentIDIndexValue); err != nil {
		t.Fatal(err)
	}
	secrets := &metav1.PartialObjectMetadata{}
	secrets.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if _, err := ca.GetInformer(ctx, secrets); err != nil {
		t.Fatal(err)
	}
	go func() { _ = ca.Start(ctx) }()
	if !ca.WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}
	return ca, cancel
}

// admit runs the injection webhook's handler on a Deployment asking for value.
func admit(t *testing.T, h *inject.Injector, ns, name, value string, labels map[string]string) admission.Response {
	t.Helper()
	dep := deployment(ns, name, map[string]string{decov1.AnnotationInject: value}, labels, "app")
	raw, err := json.Marshal(dep)
	if err != nil {
		t.Fatal(err)
	}
	return h.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Namespace: ns, Name: name,
		Kind:   metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
		Object: runtime.RawExtension{Raw: raw},
	}})
}

// patched reports the Decofile the response labels the workload with, from its patches.
func patched(resp admission.Response) string {
	for _, p := range resp.Patches {
		if s, _ := json.Marshal(p.Value); strings.Contains(p.Path, "/metadata/labels") && strings.Contains(string(s), decov1.LabelDecofile) {
			var labels map[string]string
			if json.Unmarshal(s, &labels) == nil {
				return labels[decov1.LabelDecofile]
			}
		}
		if p.Path == "/metadata/labels/"+strings.ReplaceAll(decov1.LabelDecofile, "/", "~1") {
			v, _ := p.Value.(string)
			return v
		}
	}
	return ""
}

// TestAdmissionAnswersFromTheCache: with the cache in step, admitting a workload by deploymentId
// or by name reads no Decofile, Decofile list or Secret from the API server; only the namespace.
func TestAdmissionAnswersFromTheCache(t *testing.T) {
	c := cluster(t)
	tn := c.Tenant(t, "inject-cached", nil)
	d := decofile(t, c.Client, tn.Namespace, "storefront-config", "storefront", "", decov1.FormatBin)
	ca, _ := startCache(t, c)
	live := &countingReader{Reader: c.Client, reads: map[string]int{}}
	h := &inject.Injector{Cache: ca, Reader: live, S3: testS3}

	for _, tc := range []struct {
		value  string
		labels map[string]string
	}{
		{inject.InjectByDeploymentID, map[string]string{decov1.LabelDeploymentID: "storefront"}},
		{d.Name, nil},
	} {
		resp := admit(t, h, tn.Namespace, "site", tc.value, tc.labels)
		if !resp.Allowed || len(resp.Warnings) != 0 || patched(resp) != d.Name {
			t.Errorf("inject %q: allowed %v, warnings %q, injected %q; want %q without warnings", tc.value, resp.Allowed, resp.Warnings, patched(resp), d.Name)
		}
		if got := live.Take(); len(got) != 1 || got["*v1.Namespace"] != 1 {
			t.Errorf("inject %q read %v from the API server, want the namespace alone", tc.value, got)
		}
	}
}

// TestWorkloadAppliedRightAfterItsDecofile: a Decofile (and its reload Secret) created after the
// cache last looked — applied in the same breath as the workload — is still injected, by
// deploymentId and by name, from single reads of the API server; a deploymentId no Decofile has
// is a warning after reading metadata only; and when more new Decofiles than an admission may
// read are unknown to the cache, the admission fails (the webhook fails closed) instead of
// reading them all.
func TestWorkloadAppliedRightAfterItsDecofile(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	tn := c.Tenant(t, "inject-fresh", nil)
	decofile(t, c.Client, tn.Namespace, "older", "", "", decov1.FormatJSON)
	ca, stop := startCache(t, c)
	stop()

	// As the tenant applies them; status and Secret as the delivery controller writes them.
	fresh := &decov1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: "fresh-config", Namespace: tn.Namespace},
		Spec:       decov1.DecofileSpec{Source: decov1.SourceInline, DeploymentID: "storefront", Inline: inlineHome()},
	}
	if err := tn.Client.Create(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	fresh.Status.Format = decov1.FormatBin
	if err := c.Client.Status().Update(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if err := c.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fresh.ReloadSecretName(), Namespace: tn.Namespace}}); err != nil {
		t.Fatal(err)
	}
	var probe decov1.Decofile
	if err := ca.Get(ctx, client.ObjectKeyFromObject(fresh), &probe); !apierrors.IsNotFound(err) {
		t.Fatalf("the stopped cache has the new Decofile (%v): the test would prove nothing", err)
	}

	live := &countingReader{Reader: c.Client, reads: map[string]int{}}
	h := &inject.Injector{Cache: ca, Reader: live, S3: testS3}
	for _, tc := range []struct {
		value  string
		labels map[string]string
		want   map[string]int
	}{
		// The namespace, the Decofiles' metadata (one page), the new one, the Secret's metadata.
		{inject.InjectByDeploymentID, map[string]string{decov1.LabelDeploymentID: "storefront"},
			map[string]int{"*v1.Namespace": 1, "*v1.PartialObjectMetadataList/DecofileList": 1, "*v1alpha1.Decofile": 1, "*v1.PartialObjectMetadata/Secret": 1}},
		{fresh.Name, nil, map[string]int{"*v1.Namespace": 1, "*v1alpha1.Decofile": 1, "*v1.PartialObjectMetadata/Secret": 1}},
	} {
		start := time.Now()
		resp := admit(t, h, tn.Namespace, "site", tc.value, tc.labels)
		if !resp.Allowed || len(resp.Warnings) != 0 || patched(resp) != fresh.Name {
			t.Errorf("inject %q: allowed %v (%v), warnings %q, injected %q; want %q without warnings", tc.value, resp.Allowed, resp.Result, resp.Warnings, patched(resp), fresh.Name)
		}
		if got := live.Take(); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("inject %q read %v from the API server, want %v", tc.value, got, tc.want)
		}
		t.Logf("inject %q: %v", tc.value, time.Since(start))
	}

	resp := admit(t, h, tn.Namespace, "ghost", inject.InjectByDeploymentID, map[string]string{decov1.LabelDeploymentID: "nobody"})
	if !resp.Allowed || len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], `has deploymentId "nobody"`) {
		t.Errorf("missing deploymentId: allowed %v, warnings %q", resp.Allowed, resp.Warnings)
	}
	if got := live.Take(); got["*v1alpha1.DecofileList"] != 0 || got["*v1alpha1.Decofile"] != 1 {
		t.Errorf("missing deploymentId read %v from the API server: want the new Decofile once and no list of whole Decofiles", got)
	}

	// Four more: five new to the cache, one more than an admission reads.
	for i := range 4 {
		d := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("burst-%d", i), Namespace: tn.Namespace},
			Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: inlineHome()}}
		if err := tn.Client.Create(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	resp = admit(t, h, tn.Namespace, "ghost", inject.InjectByDeploymentID, map[string]string{decov1.LabelDeploymentID: "nobody"})
	if resp.Allowed || resp.Result == nil || resp.Result.Code != 500 || !strings.Contains(resp.Result.Message, "has not caught up") {
		t.Errorf("five Decofiles new to the cache: allowed %v, result %+v; want an error saying the cache has not caught up", resp.Allowed, resp.Result)
	}
	if got := live.Take(); got["*v1alpha1.Decofile"] != 0 || got["*v1alpha1.DecofileList"] != 0 {
		t.Errorf("read %v from the API server past the bound, want metadata only", got)
	}
}

// TestLiveReadsAreBounded: a tenant whose Decofile has no stored format yet, and a ConfigMap of
// 1 MiB of its own under the Decofile's ConfigMap name, sends 40 admissions at once; the webhook
// reads that ConfigMap for each, but never more than four reads of the API server at a time,
// so however many arrive, the replica holds a few MiB of them. Each is still answered.
func TestLiveReadsAreBounded(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	tn := c.Tenant(t, "inject-bounded", nil)
	d := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: tn.Namespace},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: inlineHome()}}
	if err := tn.Client.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: d.ConfigMapName(), Namespace: tn.Namespace},
		Data: map[string]string{decov1.KeyBin: strings.Repeat("b", 1<<20-1<<10)}}
	if err := tn.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	ca, _ := startCache(t, c)
	live := &countingReader{Reader: c.Client, reads: map[string]int{}}
	h := &inject.Injector{Cache: ca, Reader: live, S3: testS3}

	var wg sync.WaitGroup
	results := make(chan admission.Response, 40)
	for i := range 40 {
		wg.Go(func() { results <- admit(t, h, tn.Namespace, fmt.Sprintf("site-%d", i), d.Name, nil) })
	}
	wg.Wait()
	close(results)
	for resp := range results {
		if !resp.Allowed || patched(resp) != d.Name {
			t.Fatalf("allowed %v (%v), injected %q", resp.Allowed, resp.Result, patched(resp))
		}
	}
	got := live.Take()
	if got["*v1.ConfigMap"] != 40 {
		t.Errorf("read the ConfigMap %d times, want 40 (the test would prove nothing)", got["*v1.ConfigMap"])
	}
	if live.most > 4 {
		t.Errorf("%d reads of the API server in flight at once, want at most 4", live.most)
	}
	t.Logf("reads in flight at most: %d", live.most)
}

func inlineHome() *decov1.InlineSource {
	return &decov1.InlineSource{Value: map[string]apiextensionsv1.JSON{"home": {Raw: []byte(`{"title":"Home"}`)}}}
}
