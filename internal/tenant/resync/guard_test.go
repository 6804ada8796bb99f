package resync

import (
	"fmt"
	"testing"
	"time"
)

func TestGuardHoldsOneUserOnly(t *testing.T) {
	var g Guard
	unlock := g.Lock("a")
	mark, roundDone := g.Mark()
	defer roundDone()
	if _, ok := g.TryHold("a", mark); ok {
		t.Fatal("a round held a user the controller is changing")
	}
	done := make(chan struct{})
	go func() { g.Lock("b")(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("changing user b waited for user a")
	}
	release, ok := g.TryHold("c", mark)
	if !ok {
		t.Fatal("a round could not hold an idle user")
	}
	release()
	unlock()
	if _, ok := g.TryHold("a", mark); ok {
		t.Fatal("a round held a user changed after its mark: it would apply state older than the controller's")
	}
	later, laterDone := g.Mark()
	defer laterDone()
	if release, ok := g.TryHold("a", later); !ok {
		t.Fatal("a round could not hold a user changed before its mark")
	} else {
		release()
	}
}

func TestGuardRoundMakesControllerWait(t *testing.T) {
	var g Guard
	mark, done := g.Mark()
	defer done()
	release, ok := g.TryHold("a", mark)
	if !ok {
		t.Fatal("TryHold of an idle user failed")
	}
	locked := make(chan struct{})
	go func() { g.Lock("a")(); close(locked) }()
	select {
	case <-locked:
		t.Fatal("the controller changed a user while a round applied it")
	case <-time.After(50 * time.Millisecond):
	}
	release()
	<-locked
}

// TestGuardLetsGoOfUsers: the users of namespaces that are gone are not kept. A user is kept
// only while held, or while a round that marked before its last change runs; that round still
// refuses it after the controller deleted it.
func TestGuardLetsGoOfUsers(t *testing.T) {
	var g Guard
	for i := range 1000 {
		g.Lock(fmt.Sprintf("tenant-%d", i))()
	}
	if n := g.len(); n != 0 {
		t.Fatalf("the guard keeps %d users after their changes ended, want 0", n)
	}

	mark, done := g.Mark()
	var releases []func()
	for i := range 100 {
		release, ok := g.TryHold(fmt.Sprintf("tenant-%d", i), mark)
		if !ok {
			t.Fatalf("a round could not hold idle user tenant-%d", i)
		}
		releases = append(releases, release)
	}
	if n := g.len(); n != 100 {
		t.Fatalf("the guard keeps %d users while a round holds 100", n)
	}
	for _, r := range releases {
		r()
	}
	// The controller deletes user gone after the round listed it.
	g.Lock("gone")()
	if n := g.len(); n != 1 {
		t.Fatalf("the guard keeps %d users while a round that marked before a change runs, want 1", n)
	}
	if _, ok := g.TryHold("gone", mark); ok {
		t.Fatal("a round held a user deleted after its mark: it would provision it again")
	}
	done()
	done() // a second call does nothing
	if n := g.len(); n != 0 {
		t.Fatalf("the guard keeps %d users after every round and change ended, want 0", n)
	}
	if len(g.rounds) != 0 {
		t.Fatalf("the guard keeps %d ended rounds", len(g.rounds))
	}
}
