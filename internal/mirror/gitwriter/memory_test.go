package gitwriter

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

const mib = 1 << 20

// rejectingRemote is a real git remote whose pre-receive hook refuses every push, as a host does
// while a branch is frozen or over quota.
func rejectingRemote(t testing.TB, name string) (url, bare string) {
	t.Helper()
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	url, err := remote.CreateRepo(name, "main")
	if err != nil {
		t.Fatal(err)
	}
	bare = remote.RepoDir(name)
	hook := "#!/bin/sh\necho 'pushes to this repository are frozen' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(bare, "hooks", "pre-receive"), []byte(hook), 0o755); err != nil {
		t.Fatal(err)
	}
	return url, bare
}

// bigChange is change i of object i%objects: 1 MiB of content that differs on every change.
func bigChange(i, objects int) Op {
	content := make([]byte, mib)
	copy(content, fmt.Sprintf("change: %d\n", i))
	name := fmt.Sprintf("obj-%d", i%objects)
	return Op{Kind: OpUpsert, Change: Change{Path: "m/ns/core/configmaps/" + name + ".yaml", Content: content, Ref: "v1/configmaps/ns/" + name, Received: time.Now()},
		Cursor: Cursor{TargetUID: "t", GVR: cmGVR, Namespace: "ns", RV: fmt.Sprint(i + 1)}}
}

// liveHeap is the heap in use after a collection: what the process really holds.
func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// rejectedPushLoad hands changes of 1 MiB objects to a writer whose remote refuses every push,
// and returns the peak live heap above the start (sampled every sampleEvery changes) and the
// writer.
func rejectedPushLoad(t testing.TB, changes, objects, sampleEvery int) (uint64, *Writer) {
	t.Helper()
	url, _ := rejectingRemote(t, "frozen")
	w := New(Config{URL: url, Branch: "main", Committer: Signature{"Mirror", "mirror@example.com"}, Window: 10 * time.Millisecond, RetryInterval: 20 * time.Millisecond, Egress: localEgress(t)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	base := liveHeap()
	var peak uint64
	sample := func() {
		if h := liveHeap(); h > base && h-base > peak {
			peak = h - base
		}
	}
	for i := range changes {
		if err := w.Enqueue(ctx, bigChange(i, objects)); err != nil {
			t.Fatal(err)
		}
		if i%sampleEvery == sampleEvery-1 {
			sample()
		}
	}
	// Let the writer take what is queued, then look once more.
	testenv.Eventually(t, time.Minute, func() error {
		if st := w.Status(); st.Pending > objects || st.LastError == nil {
			return fmt.Errorf("pending %d (want at most %d distinct objects), last error %w", st.Pending, objects, st.LastError)
		}
		return nil
	})
	sample()
	return peak, w
}

// TestWriterMemoryBoundedWhileRemoteRejects: while the remote refuses every push, a writer
// receiving many changes of a few 1 MiB objects holds about one copy per object, not one per
// change: pending changes coalesce per file and the blobs of refused pushes are released.
func TestWriterMemoryBoundedWhileRemoteRejects(t *testing.T) {
	const changes, objects = 600, 20
	peak, w := rejectedPushLoad(t, changes, objects, 50)
	// Per object: the pending content, its blob while a push is built, and the packed copy in
	// flight; plus the 64 MiB input bound, go-git's 96 MiB object cache (filled by the fetch
	// after a refused push; seen at +250 MiB under a loaded run) and some slack.
	bound := uint64(objects*3*mib + 64*mib + 96*mib + 32*mib)
	t.Logf("%d changes of 1 MiB over %d objects, pushes refused: peak live heap +%d MiB (bound %d MiB), pending %d",
		changes, objects, peak/mib, bound/mib, w.Status().Pending)
	if peak > bound {
		t.Fatalf("peak live heap grew by %d MiB for %d changes of %d objects; want at most %d MiB", peak/mib, changes, objects, bound/mib)
	}
}

// BenchmarkWriterMemoryWhileRemoteRejects feeds one 1 MiB change per iteration, over 200 objects,
// to a writer whose remote refuses every push, and reports the peak live heap. Ten minutes at
// 100 changes/s is -benchtime=60000x.
func BenchmarkWriterMemoryWhileRemoteRejects(b *testing.B) {
	const objects = 200
	peak, w := rejectedPushLoad(b, b.N, objects, 1000)
	b.ReportMetric(float64(peak)/mib, "peak-heap-MiB")
	b.ReportMetric(float64(w.Status().Pending), "pending-ops")
}

// TestWriterPushesLatestContentAfterRejections: changes coalesced while the remote refused
// pushes reach it with the latest content of each file once it accepts again, and the watch
// cursor recorded is the newest, only after that push.
func TestWriterPushesLatestContentAfterRejections(t *testing.T) {
	url, bare := rejectingRemote(t, "thaw")
	rec := &recorder{}
	w, _ := startWriter(t, Config{URL: url, Branch: "main", Committer: Signature{"Mirror", "mirror@example.com"}, Window: 10 * time.Millisecond, RetryInterval: 50 * time.Millisecond, Cursors: rec})
	ctx := context.Background()
	other := upsert("m/ns/core/configmaps/other.yaml", "o\n", "")
	other.Cursor = Cursor{TargetUID: "t2", GVR: cmGVR, Namespace: "ns", RV: "7"}
	for i, op := range []Op{upsert("m/ns/core/configmaps/a.yaml", "a: 1\n", "1"), upsert("m/ns/core/configmaps/b.yaml", "b: 1\n", "2"), other} {
		if err := w.Enqueue(ctx, op); err != nil {
			t.Fatal(i, err)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if w.Status().LastError == nil {
			return fmt.Errorf("no push refused yet")
		}
		return nil
	})
	// While refused: a newer change of a, a mark of the same stream, and a change of a from
	// another stream (whose older cursor must survive its file change being replaced).
	mark := Op{Kind: OpMark, Cursor: Cursor{TargetUID: "t", GVR: cmGVR, Namespace: "ns", RV: "4"}}
	fromOther := upsert("m/ns/core/configmaps/other.yaml", "o2\n", "")
	fromOther.Cursor = Cursor{TargetUID: "t3", GVR: cmGVR, Namespace: "ns", RV: "9"}
	for _, op := range []Op{upsert("m/ns/core/configmaps/a.yaml", "a: 3\n", "3"), mark, fromOther} {
		if err := w.Enqueue(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if p := w.Status().Pending; p != 5 {
			return fmt.Errorf("pending %d, want 5 (b, other's cursor, a, mark, other)", p)
		}
		return nil
	})
	if err := os.Remove(filepath.Join(bare, "hooks", "pre-receive")); err != nil {
		t.Fatal(err)
	}
	waitCommits(t, bare, 1)
	for path, want := range map[string]string{"a.yaml": "a: 3", "b.yaml": "b: 1", "other.yaml": "o2"} {
		if got := gitOut(t, "", "--git-dir", bare, "show", "main:m/ns/core/configmaps/"+path); got != want {
			t.Fatalf("%s = %q, want %q", path, got, want)
		}
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if got := [3]string{rec.get("t/configmaps/ns"), rec.get("t2/configmaps/ns"), rec.get("t3/configmaps/ns")}; got != [3]string{"4", "7", "9"} {
			return fmt.Errorf("cursors %v, want [4 7 9]", got)
		}
		return nil
	})
}
