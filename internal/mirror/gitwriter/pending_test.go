package gitwriter

import (
	"fmt"
	"testing"
	"time"
)

// TestPendingChangesAreBoundedCopies fills a writer's pending buffer with more changes of one
// GitTarget than PendingChanges returns, and a few of another: each target sees only its own
// file changes (no marks), oldest first, at most MaxPendingChanges whatever limit asks for.
// What it returns is a copy: changing it, or the writer's buffer afterwards (an author edited in
// place, a coalesced change, a push), leaves an earlier answer as it was.
func TestPendingChangesAreBoundedCopies(t *testing.T) {
	w := New(Config{URL: "https://example.com/repo.git", Branch: "main"})
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	alice := &Signature{Name: "alice", Email: "alice@example.com"}
	for i := range MaxPendingChanges + 50 {
		w.pending.add(Op{Kind: OpUpsert, Target: "a", Change: Change{Path: fmt.Sprintf("a/cm-%03d.yaml", i), Content: []byte("x"),
			Ref: fmt.Sprintf("v1/configmaps/ns/cm-%03d", i), Kind: "ConfigMap", Received: at.Add(time.Duration(i) * time.Second)}})
		if i%10 == 0 {
			w.pending.add(Op{Kind: OpMark, Target: "a", Cursor: Cursor{TargetUID: "a", RV: fmt.Sprint(i)}})
		}
	}
	w.pending.add(Op{Kind: OpDelete, Target: "b", Change: Change{Path: "b/gone.yaml", Ref: "v1/configmaps/ns/gone", Kind: "ConfigMap",
		Received: at, Author: alice, Attribution: "exact_user"}})
	w.pending.add(Op{Kind: OpSweep, Target: "b", SweepDir: "b/ns/core/configmaps", SweepRefPrefix: "v1/configmaps/ns/"})

	for _, limit := range []int{0, -1, MaxPendingChanges, MaxPendingChanges + 1, 1000} {
		if got := w.PendingChanges("a", limit); len(got) != MaxPendingChanges {
			t.Errorf("limit %d: %d changes, want the bound %d", limit, len(got), MaxPendingChanges)
		}
	}
	if got := w.PendingChanges("a", 3); len(got) != 3 || got[0].Path != "a/cm-000.yaml" || got[2].Path != "a/cm-002.yaml" {
		t.Errorf("limit 3: %+v, want the three oldest", got)
	}
	a := w.PendingChanges("a", 0)
	if a[99].Path != "a/cm-099.yaml" || a[99].Operation != PendingWrite || a[99].Kind != "ConfigMap" || a[99].Ref != "v1/configmaps/ns/cm-099" ||
		!a[99].Received.Equal(at.Add(99*time.Second)) || a[99].Author != "" {
		t.Errorf("the 100th change is %+v", a[99])
	}
	b := w.PendingChanges("b", 0)
	want := []PendingChange{
		{Path: "b/gone.yaml", Operation: PendingDelete, Kind: "ConfigMap", Ref: "v1/configmaps/ns/gone", Received: at, Author: "alice <alice@example.com>", Attribution: "exact_user"},
		{Path: "b/ns/core/configmaps", Operation: PendingSweep, Ref: "v1/configmaps/ns/"},
	}
	if fmt.Sprint(b) != fmt.Sprint(want) {
		t.Fatalf("target b: %+v, want %+v", b, want)
	}
	if got := w.PendingChanges("nobody", 0); len(got) != 0 {
		t.Errorf("an unknown target has %d pending changes", len(got))
	}

	// Changing an answer changes neither the buffer nor another answer.
	a[0].Path, b[0].Author = "changed", "mallory"
	if got := w.PendingChanges("a", 1); got[0].Path != "a/cm-000.yaml" {
		t.Errorf("an answer changed the buffer: %q", got[0].Path)
	}
	// Changing the buffer changes no earlier answer.
	b1 := w.PendingChanges("b", 0)
	alice.Name = "eve"
	if b1[0].Author != "alice <alice@example.com>" {
		t.Errorf("an author edited in place changed an earlier answer: %q", b1[0].Author)
	}
	w.pending.startCoalescing()
	w.pending.add(Op{Kind: OpUpsert, Target: "b", Change: Change{Path: "b/gone.yaml", Content: []byte("back"), Ref: "v1/configmaps/ns/gone", Kind: "ConfigMap", Received: at.Add(time.Hour)}})
	if now := w.PendingChanges("b", 0); len(now) != 2 || now[1].Path != "b/gone.yaml" || now[1].Operation != PendingWrite || now[1].Author != "" {
		t.Errorf("after the file's newer change: %+v, want the sweep then the write replacing the delete", now)
	}
	b2 := w.PendingChanges("b", 0)
	w.pending.reset()
	if b2[1].Operation != PendingWrite || b2[0].Path != "b/ns/core/configmaps" || b1[0].Operation != PendingDelete {
		t.Errorf("a reset changed an earlier answer: %+v", b2)
	}
	if got := w.PendingChanges("a", 0); len(got) != 0 || a[1].Path != "a/cm-001.yaml" || b1[0].Path != "b/gone.yaml" {
		t.Errorf("after the push: %d pending; the earlier answers %q, %q", len(got), a[1].Path, b1[0].Path)
	}
}
