package watch

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/age"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/mirror/gitwriter"
	"github.com/siteops/siteops/internal/mirror/secretcrypt"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m, servers.APIServerOptions{}) }

var cmGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// recordingSink keeps every op, as the git writer would receive them.
type recordingSink struct {
	mu  sync.Mutex
	ops []gitwriter.Op
}

func (s *recordingSink) Enqueue(_ context.Context, op gitwriter.Op) error {
	s.mu.Lock()
	s.ops = append(s.ops, op)
	s.mu.Unlock()
	return nil
}

// find waits for an op matching pred and returns it.
func (s *recordingSink) find(t *testing.T, what string, pred func(gitwriter.Op) bool) gitwriter.Op {
	t.Helper()
	var found gitwriter.Op
	testenv.Eventually(t, 15*time.Second, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, op := range s.ops {
			if pred(op) {
				found = op
				return nil
			}
		}
		return fmt.Errorf("no %s among %d ops", what, len(s.ops))
	})
	return found
}

type fixedCursor struct{ rv string }

func (c fixedCursor) LookupWatchCursor(context.Context, string, schema.GroupVersionResource, string) (string, bool) {
	return c.rv, c.rv != ""
}

func run(t *testing.T, cfg Config) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = New(cfg).Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func TestReplayThenFollow(t *testing.T) {
	c := testenv.APIServer(t)
	ns := c.Namespace(t, "watch", nil)
	ctx := context.Background()
	for _, n := range []string{"a", "b"} {
		if err := c.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: ns}, Data: map[string]string{"k": n}}); err != nil {
			t.Fatal(err)
		}
	}
	dyn := dynamic.NewForConfigOrDie(c.Config)
	sink := &recordingSink{}
	var replays []string
	var mu sync.Mutex
	run(t, Config{Client: dyn, GVR: cmGVR, Namespace: ns, TargetUID: "uid", BasePath: "base", Sink: sink,
		Operations: []mirrorv1alpha1.Operation{mirrorv1alpha1.OperationCreate, mirrorv1alpha1.OperationDelete},
		OnReplay:   func(r string) { mu.Lock(); replays = append(replays, r); mu.Unlock() }})

	sweep := sink.find(t, "sweep", func(op gitwriter.Op) bool { return op.Kind == gitwriter.OpSweep })
	if sweep.SweepDir != "base/"+ns+"/core/configmaps" || len(sweep.Keep) != 2 || sweep.Cursor.RV == "" {
		t.Fatalf("sweep = %+v", sweep)
	}
	sink.mu.Lock()
	for _, op := range sink.ops[:2] {
		if op.Kind != gitwriter.OpUpsert || op.Cursor.RV != "" || !strings.Contains(string(op.Change.Content), "kind: ConfigMap") {
			t.Errorf("replayed op %+v: want an upsert without a cursor", op)
		}
	}
	sink.mu.Unlock()

	// Updates are not in Operations: they only move the cursor. Deletes are.
	a := &corev1.ConfigMap{}
	if err := c.Client.Get(ctx, keyOf(ns, "a"), a); err != nil {
		t.Fatal(err)
	}
	a.Data["k"] = "changed"
	if err := c.Client.Update(ctx, a); err != nil {
		t.Fatal(err)
	}
	mark := sink.find(t, "mark for the update", func(op gitwriter.Op) bool { return op.Cursor.RV == a.ResourceVersion })
	if mark.Kind != gitwriter.OpMark {
		t.Fatalf("filtered update gave %+v", mark)
	}
	b := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: ns}}
	if err := c.Client.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	del := sink.find(t, "delete", func(op gitwriter.Op) bool { return op.Kind == gitwriter.OpDelete })
	if del.Change.Path != "base/"+ns+"/core/configmaps/b.yaml" || del.Change.Ref != "v1/configmaps/"+ns+"/b" || del.Cursor.RV == "" {
		t.Fatalf("delete = %+v", del)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(replays) != 1 || replays[0] != "no-cursor" {
		t.Fatalf("replays = %v", replays)
	}
}

func TestResumeFromCursorDoesNotReplay(t *testing.T) {
	c := testenv.APIServer(t)
	ns := c.Namespace(t, "watch", nil)
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns}}
	if err := c.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	sink := &recordingSink{}
	replayed := false
	run(t, Config{Client: dynamic.NewForConfigOrDie(c.Config), GVR: cmGVR, Namespace: ns, TargetUID: "uid", Sink: sink,
		Cursors: fixedCursor{cm.ResourceVersion}, OnReplay: func(string) { replayed = true }})
	cm2 := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: ns}}
	if err := c.Client.Create(ctx, cm2); err != nil {
		t.Fatal(err)
	}
	sink.find(t, "b", func(op gitwriter.Op) bool {
		return op.Kind == gitwriter.OpUpsert && strings.HasSuffix(op.Change.Path, "/b.yaml")
	})
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for _, op := range sink.ops {
		if strings.HasSuffix(op.Change.Path, "/a.yaml") || op.Kind == gitwriter.OpSweep {
			t.Fatalf("resumed stream replayed: %+v", op)
		}
	}
	if replayed {
		t.Fatal("OnReplay called on a resume")
	}
}

// TestGoneCursorReplaysAndSweeps needs a compacted history: a server without watch cache that
// compacts etcd every second answers 410 Gone to a watch from an old resourceVersion.
func TestGoneCursorReplaysAndSweeps(t *testing.T) {
	c := testenv.NewAPIServer(t, servers.APIServerOptions{Configure: func(env *envtest.Environment) {
		args := env.ControlPlane.GetAPIServer().Configure()
		args.Set("watch-cache", "false")
		args.Set("etcd-compaction-interval", "1s")
	}})
	ns := c.Namespace(t, "watch", nil)
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns}, Data: map[string]string{"v": "0"}}
	if err := c.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	old := cm.ResourceVersion
	for i := range 5 {
		cm.Data["v"] = fmt.Sprint(i + 1)
		if err := c.Client.Update(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	// Wait until the old resourceVersion is compacted away.
	dyn := dynamic.NewForConfigOrDie(c.Config)
	testenv.Eventually(t, 20*time.Second, func() error {
		w, err := dyn.Resource(cmGVR).Namespace(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: old})
		if err != nil {
			return nil // 410 on the request itself
		}
		defer w.Stop()
		select {
		case ev := <-w.ResultChan():
			if ev.Type == "ERROR" {
				return nil
			}
			return fmt.Errorf("watch from %s still delivers %s", old, ev.Type)
		case <-time.After(time.Second):
			return fmt.Errorf("no event")
		}
	})
	sink := &recordingSink{}
	var mu sync.Mutex
	var replays []string
	run(t, Config{Client: dyn, GVR: cmGVR, Namespace: ns, TargetUID: "uid", Sink: sink, Cursors: fixedCursor{old},
		OnReplay: func(r string) { mu.Lock(); replays = append(replays, r); mu.Unlock() }})
	sweep := sink.find(t, "sweep", func(op gitwriter.Op) bool { return op.Kind == gitwriter.OpSweep })
	if _, ok := sweep.Keep[ns+"/core/configmaps/a.yaml"]; !ok || len(sweep.Keep) != 1 {
		t.Fatalf("sweep keep = %v", sweep.Keep)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(replays) != 1 || replays[0] != "expired" {
		t.Fatalf("replays = %v", replays)
	}
}

func keyOf(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }

func TestLiveEventsGoThroughSubmitEvent(t *testing.T) {
	c := testenv.APIServer(t)
	ns := c.Namespace(t, "watch", nil)
	ctx := context.Background()
	if err := c.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	sink := &recordingSink{}
	type submitted struct {
		op    gitwriter.Op
		uid   string
		rv    string
		exact bool
	}
	var mu sync.Mutex
	var subs []submitted
	run(t, Config{Client: dynamic.NewForConfigOrDie(c.Config), GVR: cmGVR, Namespace: ns, TargetUID: "uid", Sink: sink,
		SubmitEvent: func(_ context.Context, op gitwriter.Op, uid types.UID, rv string, exact bool) error {
			mu.Lock()
			subs = append(subs, submitted{op, string(uid), rv, exact})
			mu.Unlock()
			return nil
		}})
	sink.find(t, "sweep", func(op gitwriter.Op) bool { return op.Kind == gitwriter.OpSweep })
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "new", Namespace: ns}}
	if err := c.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if err := c.Client.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(subs) != 2 {
			return fmt.Errorf("%d submitted", len(subs))
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if subs[0].op.Kind != gitwriter.OpUpsert || subs[0].uid != string(cm.UID) || subs[0].rv != subs[0].op.Cursor.RV || !subs[0].exact {
		t.Errorf("create submitted as %+v", subs[0])
	}
	if subs[1].op.Kind != gitwriter.OpDelete || subs[1].uid != string(cm.UID) || subs[1].exact {
		t.Errorf("delete submitted as %+v", subs[1])
	}
	sink.mu.Lock()
	defer sink.mu.Unlock()
	for _, op := range sink.ops {
		if strings.HasSuffix(op.Change.Path, "/new.yaml") {
			t.Errorf("live event bypassed SubmitEvent: %+v", op)
		}
	}
}

// TestDeletedSecretsAreForgotten: the ciphertexts remembered for Secrets are let go when the
// Secrets are deleted, so a namespace that creates and deletes Secrets in a loop leaves nothing.
func TestDeletedSecretsAreForgotten(t *testing.T) {
	c := testenv.APIServer(t)
	ns := c.Namespace(t, "watch-secrets", nil)
	ctx := context.Background()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	enc := secretcrypt.New("uid", []string{id.Recipient().String()}, []byte("hash-key"), nil)
	sink := &recordingSink{}
	run(t, Config{Client: dynamic.NewForConfigOrDie(c.Config), GVR: schema.GroupVersionResource{Version: "v1", Resource: "secrets"},
		Namespace: ns, TargetUID: "uid", BasePath: "base", Sink: sink, Secrets: enc})
	const n = 20
	count := func(kind gitwriter.OpKind) int {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		k := 0
		for _, op := range sink.ops {
			if op.Kind == kind {
				k++
			}
		}
		return k
	}
	for i := range n {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%d", i), Namespace: ns}, StringData: map[string]string{"k": "v"}}
		if err := c.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if got := count(gitwriter.OpUpsert); got < n {
			return fmt.Errorf("%d of %d Secrets written", got, n)
		}
		return nil
	})
	if got := enc.Remembered(); got != n {
		t.Fatalf("%d ciphertexts remembered after %d Secrets were written", got, n)
	}
	for i := range n {
		if err := c.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%d", i), Namespace: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if got := count(gitwriter.OpDelete); got < n {
			return fmt.Errorf("%d of %d deletions seen", got, n)
		}
		return nil
	})
	if got := enc.Remembered(); got != 0 {
		t.Fatalf("%d ciphertexts still remembered after every Secret was deleted", got)
	}
}
