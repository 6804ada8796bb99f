// Package budget bounds the bytes that work in flight holds, in total and per namespace: a
// weighted semaphore whose weights are bytes, with a share per namespace so that one tenant
// cannot hold all of it. Waiters that fit are admitted in any order, so a small request is not
// queued behind a large one.
package budget

import (
	"context"
	"fmt"
	"sync"
)

// Budget is a byte budget. The zero value is not usable: call New.
type Budget struct {
	total, perNamespace int64

	mu      sync.Mutex
	used    int64
	byNS    map[string]int64
	changed chan struct{} // closed (and replaced) whenever bytes are released
}

// New returns a budget of total bytes, of which one namespace may hold perNamespace (at most
// total) at a time.
func New(total, perNamespace int64) *Budget {
	return &Budget{total: total, perNamespace: min(perNamespace, total), byNS: map[string]int64{}, changed: make(chan struct{})}
}

// Total is the budget's size.
func (b *Budget) Total() int64 { return b.total }

// Used is how many bytes are held now.
func (b *Budget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// TooLargeError says a request is larger than the whole budget: it could never be admitted.
type TooLargeError struct {
	// Want is the request, Total the budget.
	Want, Total int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%d bytes wanted, more than the whole %d-byte budget", e.Want, e.Total)
}

// Acquire waits until n bytes fit for namespace ns and returns the function that gives them
// back (safe to call more than once). A namespace may go past its share only with a request
// larger than the share, and only while it holds nothing else, so any request up to the total
// can run. A request larger than the total fails at once with a *TooLargeError.
func (b *Budget) Acquire(ctx context.Context, ns string, n int64) (func(), error) {
	return b.AcquireOrReport(ctx, ns, n, nil)
}

// AcquireOrReport is Acquire that calls onWait (when set) once, before it first waits, so the
// caller can say why its work has not started.
func (b *Budget) AcquireOrReport(ctx context.Context, ns string, n int64, onWait func()) (func(), error) {
	n = max(n, 1)
	if n > b.total {
		return nil, &TooLargeError{Want: n, Total: b.total}
	}
	for {
		release, changed := b.take(ns, n)
		if release != nil {
			return release, nil
		}
		if onWait != nil {
			onWait()
			onWait = nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for %d bytes of memory: %w", n, ctx.Err())
		}
	}
}

// TryAcquire is Acquire without the wait: it takes n for namespace ns when they fit now, and
// reports whether it did.
func (b *Budget) TryAcquire(ns string, n int64) (func(), bool) {
	release, _ := b.take(ns, max(n, 1))
	return release, release != nil
}

// take holds n for ns when they fit, returning the release; otherwise it returns the channel
// closed at the next release.
func (b *Budget) take(ns string, n int64) (func(), <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	held := b.byNS[ns]
	if b.used+n <= b.total && (held+n <= b.perNamespace || held == 0) {
		b.used += n
		b.byNS[ns] += n
		var once sync.Once
		return func() { once.Do(func() { b.release(ns, n) }) }, nil
	}
	return nil, b.changed
}

func (b *Budget) release(ns string, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if b.byNS[ns] -= n; b.byNS[ns] <= 0 {
		delete(b.byNS, ns)
	}
	close(b.changed)
	b.changed = make(chan struct{})
}
