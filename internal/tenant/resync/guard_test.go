package resync

import (
	"testing"
	"time"
)

func TestGuardHoldsOneUserOnly(t *testing.T) {
	var g Guard
	unlock := g.Lock("a")
	mark := g.Mark()
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
	if release, ok := g.TryHold("a", g.Mark()); !ok {
		t.Fatal("a round could not hold a user changed before its mark")
	} else {
		release()
	}
}

func TestGuardRoundMakesControllerWait(t *testing.T) {
	var g Guard
	release, ok := g.TryHold("a", g.Mark())
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
