package rollout

import (
	"context"
	"fmt"
	"sync"
)

// budget bounds the bytes of content that running rollouts hold (each keeps its push body until
// it ends), in total and per namespace: runners are not limited in number, so without it many
// Decofiles with large content and pods that never answer could hold more than the manager has.
// The per-namespace share keeps one tenant from taking the whole budget. A rollout waits for
// room; any waiting rollout that fits is admitted, so a small one is not queued behind a large one.
type budget struct {
	total, perNamespace int64

	mu      sync.Mutex
	used    int64
	byNS    map[string]int64
	changed chan struct{} // closed (and replaced) whenever bytes are released
}

func newBudget(total, perNamespace int64) *budget {
	return &budget{total: total, perNamespace: min(perNamespace, total), byNS: map[string]int64{}, changed: make(chan struct{})}
}

// charge is what a content of n bytes counts for: never more than a namespace's share, so any
// content the delivery controller accepted can run.
func (b *budget) charge(n int64) int64 { return max(1, min(n, b.perNamespace)) }

// acquire waits until n bytes fit for namespace ns and returns the function that gives them
// back; onWait, when set, is called once if the rollout has to wait.
func (b *budget) acquire(ctx context.Context, ns string, n int64, onWait func()) (func(), error) {
	n = b.charge(n)
	waited := false
	for {
		b.mu.Lock()
		if b.used+n <= b.total && b.byNS[ns]+n <= b.perNamespace {
			b.used += n
			b.byNS[ns] += n
			b.mu.Unlock()
			var once sync.Once
			return func() { once.Do(func() { b.release(ns, n) }) }, nil
		}
		changed := b.changed
		b.mu.Unlock()
		if !waited && onWait != nil {
			waited = true
			onWait()
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for %d bytes of rollout memory: %w", n, ctx.Err())
		}
	}
}

func (b *budget) release(ns string, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if b.byNS[ns] -= n; b.byNS[ns] <= 0 {
		delete(b.byNS, ns)
	}
	close(b.changed)
	b.changed = make(chan struct{})
}
