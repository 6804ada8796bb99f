package rollout

import (
	"context"
	"testing"
	"time"
)

func TestBudget(t *testing.T) {
	ctx := context.Background()
	b := newBudget(100, 40)
	var releases []func()
	take := func(ns string, n int64) func() {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		rel, err := b.acquire(ctx, ns, n, nil)
		if err != nil {
			return nil
		}
		releases = append(releases, rel)
		return rel
	}
	if take("a", 30) == nil || take("a", 10) == nil {
		t.Fatal("namespace a cannot use its share")
	}
	if take("a", 1) != nil {
		t.Fatal("namespace a went past its share")
	}
	// Another namespace is not held up by a's full share; content above a share counts as one.
	if take("b", 1000) == nil || take("c", 20) == nil {
		t.Fatal("other namespaces were held up")
	}
	if take("d", 1) != nil {
		t.Fatal("the total was exceeded")
	}
	// A waiting rollout is admitted as soon as room is released, and a release counts once.
	got := make(chan error, 1)
	go func() {
		_, err := b.acquire(ctx, "d", 30, nil)
		got <- err
	}()
	releases[0]()
	releases[0]()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting rollout was not admitted")
	}
	if b.used != 100 || b.byNS["a"] != 10 {
		t.Fatalf("used %d, namespace a %d", b.used, b.byNS["a"])
	}
}
