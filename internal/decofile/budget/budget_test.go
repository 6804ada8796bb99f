package budget

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestNamespaceShare: one namespace holds at most its share while others wait for nothing; a
// request over the share runs alone in its namespace; one over the total is refused at once.
func TestNamespaceShare(t *testing.T) {
	ctx := context.Background()
	b := New(100, 50)
	r1, err := b.Acquire(ctx, "a", 30)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := b.Acquire(short, "a", 30); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("namespace a past its share of 50: want a wait that times out, got %v", err)
	}
	r2, err := b.Acquire(ctx, "b", 50)
	if err != nil {
		t.Fatalf("namespace b within its share: %v", err)
	}
	r1()
	r1() // twice is harmless
	r2()
	if b.Used() != 0 {
		t.Fatalf("used after release: %d", b.Used())
	}
	big, err := b.Acquire(ctx, "a", 80)
	if err != nil {
		t.Fatalf("a request over the share in an idle namespace: %v", err)
	}
	short2, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	if _, err := b.Acquire(short2, "b", 30); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("namespace b past the total: want a wait that times out, got %v", err)
	}
	big()
	if r, err := b.Acquire(ctx, "b", 30); err != nil {
		t.Fatalf("after the release: %v", err)
	} else {
		r()
	}
	var tl *TooLargeError
	if _, err := b.Acquire(ctx, "a", 101); !errors.As(err, &tl) || tl.Want != 101 || tl.Total != 100 {
		t.Fatalf("over the total: want a TooLargeError, got %v", err)
	}
}

// TestAcquireOrReportSaysWhyOnce: onWait runs once when the request has to wait, however often
// it is woken, and not at all when it fits at once.
func TestAcquireOrReportSaysWhyOnce(t *testing.T) {
	ctx := context.Background()
	b := New(11, 11)
	hold, err := b.AcquireOrReport(ctx, "a", 10, func() { t.Error("onWait called for a request that fits") })
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{}, 10)
	got := make(chan error, 1)
	go func() {
		r, err := b.AcquireOrReport(ctx, "b", 5, func() { waiting <- struct{}{} })
		if err == nil {
			r()
		}
		got <- err
	}()
	<-waiting
	// Releases that do not make room wake the waiter without a second report.
	for range 3 {
		extra, err := b.Acquire(ctx, "c", 1)
		if err != nil {
			t.Fatal(err)
		}
		extra()
		time.Sleep(20 * time.Millisecond) // lets the waiter wake and look again
	}
	hold()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if n := len(waiting); n != 0 {
		t.Fatalf("onWait called %d more times, want once", n)
	}
}

// TestTryAcquireNeverWaits: TryAcquire takes what fits now, within the namespace's share, and
// says no at once otherwise.
func TestTryAcquireNeverWaits(t *testing.T) {
	b := New(4, 2)
	r1, ok1 := b.TryAcquire("a", 2)
	_, ok2 := b.TryAcquire("a", 1)
	r3, ok3 := b.TryAcquire("b", 2)
	_, ok4 := b.TryAcquire("c", 1)
	if !ok1 || ok2 || !ok3 || ok4 {
		t.Fatalf("admitted a:2 %v, a:+1 %v, b:2 %v, c:1 over the total %v", ok1, ok2, ok3, ok4)
	}
	r1()
	r3()
	if _, ok := b.TryAcquire("c", 1); !ok || b.Used() != 1 {
		t.Fatalf("after the releases: admitted %v, used %d", ok, b.Used())
	}
}
