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
	w := New(Config{URL: url, Branch: "main", Committer: Signature{"Mirror", "mirror@example.com"}, Window: 10 * time.Millisecond, RetryInterval: 20 * time.Millisecond})
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
			return fmt.Errorf("pending %d (want at most %d distinct objects), last error %v", st.Pending, objects, st.LastError)
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
	// flight; plus the 64 MiB input bound and some slack.
	bound := uint64(objects*3*mib + 64*mib + 32*mib)
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
