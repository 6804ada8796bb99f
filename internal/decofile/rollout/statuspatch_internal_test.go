package rollout

import (
	"context"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	decofilecontroller "github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/decofile/notify"
	"github.com/siteops/siteops/internal/testenv"
)

// laggingCache is the manager's cache behind the API server, as it is for a moment after every
// write: Get answers with the Decofile as the test last froze it; writes go to the API server.
type laggingCache struct {
	client.Client
	mu     sync.Mutex
	frozen *decov1alpha1.Decofile
	gets   int
}

func (c *laggingCache) Get(_ context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gets++
	c.frozen.DeepCopyInto(obj.(*decov1alpha1.Decofile))
	return nil
}

func (c *laggingCache) freeze(d *decov1alpha1.Decofile) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozen = d.DeepCopy()
}

// countingReader counts the reads from the API server.
type countingReader struct {
	client.Reader
	mu   sync.Mutex
	gets int
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.mu.Lock()
	r.gets++
	r.mu.Unlock()
	return r.Reader.Get(ctx, key, obj, opts...)
}

func (r *countingReader) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gets
}

// statusPatchEnv is a Decofile on the API server and a Reconciler whose cache lags behind it.
func statusPatchEnv(t *testing.T) (*Reconciler, *laggingCache, *countingReader, *decov1alpha1.Decofile) {
	t.Helper()
	c := testenv.APIServer(t)
	df := &decov1alpha1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: c.Namespace(t, "statuspatch", nil)},
		Spec: decov1alpha1.DecofileSpec{Source: decov1alpha1.SourceGitHub,
			GitHub: &decov1alpha1.GitHubSource{Org: "acme", Repo: "site", Commit: "main", Path: ".deco/blocks"}},
	}
	if err := c.Client.Create(context.Background(), df); err != nil {
		t.Fatal(err)
	}
	cache := &laggingCache{Client: c.Client, frozen: df.DeepCopy()}
	reader := &countingReader{Reader: c.Client}
	status, err := decofilecontroller.NewStatusWriter(c.Config, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &Reconciler{client: cache, reader: reader, status: status}, cache, reader, df
}

// TestPatchStatusReadsAgainOnConflict: a status patch computed from a cache that has not seen the
// delivery controller's last write fails its optimistic lock; the retry reads the Decofile from
// the API server and writes on top of that write, which stays.
func TestPatchStatusReadsAgainOnConflict(t *testing.T) {
	r, cache, reader, df := statusPatchEnv(t)
	ctx := context.Background()
	delivered := df.DeepCopy()
	meta.SetStatusCondition(&delivered.Status.Conditions, metav1.Condition{Type: decov1alpha1.ConditionReady,
		Status: metav1.ConditionTrue, Reason: decov1alpha1.ReasonSucceeded, Message: "stored"})
	delivered.Status.ContentHash = "sha256:aa"
	if err := r.client.Status().Update(ctx, delivered); err != nil {
		t.Fatal(err)
	}

	if err := r.patchStatus(ctx, client.ObjectKeyFromObject(df), beginRollout("commit:abc", 2, ptrTime(metav1.Now()))); err != nil {
		t.Fatalf("patchStatus: %v", err)
	}
	if cache.gets != 1 || reader.count() != 1 {
		t.Errorf("%d reads from the cache and %d from the API server, want 1 and 1 (after the conflict)", cache.gets, reader.count())
	}
	var got decov1alpha1.Decofile
	if err := reader.Reader.Get(ctx, client.ObjectKeyFromObject(df), &got); err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionTrue(got.Status.Conditions, decov1alpha1.ConditionReady) || got.Status.ContentHash != "sha256:aa" {
		t.Errorf("the delivery controller's status was overwritten: %+v", got.Status)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, decov1alpha1.ConditionPodsNotified); c == nil || c.Status != metav1.ConditionUnknown ||
		got.Status.Rollout == nil || got.Status.Rollout.ID != "commit:abc" {
		t.Errorf("the rollout start is not recorded: %+v", got.Status)
	}
}

// TestPatchStatusSeesItsOwnWrite: the step of a rollout is recorded even when the cache does not
// show the rollout's start yet (a step is only recorded on the rollout it belongs to): after its
// own write the controller reads from the API server until the cache has that write, and from
// the cache again once it has.
func TestPatchStatusSeesItsOwnWrite(t *testing.T) {
	r, cache, reader, df := statusPatchEnv(t)
	ctx := context.Background()
	key := client.ObjectKeyFromObject(df)
	if err := r.patchStatus(ctx, key, beginRollout("commit:abc", 3, ptrTime(metav1.Now()))); err != nil {
		t.Fatalf("record the start: %v", err)
	}
	if reader.count() != 0 {
		t.Errorf("the start was written after %d reads from the API server, want 0: the cache was current", reader.count())
	}
	run := &stepRun{key: key, id: "commit:abc", acc: notify.Progress{Total: 3}}
	r.recordStep(ctx, run, 1, 2, 0, PhaseNotifying)
	var got decov1alpha1.Decofile
	if err := reader.Reader.Get(ctx, key, &got); err != nil {
		t.Fatal(err)
	}
	if ro := got.Status.Rollout; ro == nil || ro.Step != 1 || ro.Steps != 2 || ro.Phase != PhaseNotifying {
		t.Fatalf("step 1 not recorded while the cache lagged: %+v", ro)
	}
	if reader.count() != 1 {
		t.Errorf("%d reads from the API server for the step, want 1", reader.count())
	}

	cache.freeze(&got) // the cache has caught up
	r.recordStep(ctx, run, 1, 2, 1, PhasePausing)
	if reader.count() != 1 {
		t.Errorf("read from the API server though the cache had the last write (%d reads)", reader.count())
	}
	if err := reader.Reader.Get(ctx, key, &got); err != nil {
		t.Fatal(err)
	}
	if ro := got.Status.Rollout; ro.Phase != PhasePausing || ro.Updated != 1 {
		t.Errorf("pause not recorded: %+v", ro)
	}
}

func ptrTime(t metav1.Time) *metav1.Time { return &t }
