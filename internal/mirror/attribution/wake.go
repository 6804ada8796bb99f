package attribution

import (
	"context"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// waiter is one waiting event, woken when a token it waits for is announced.
type waiter struct {
	tokens []string
	wake   chan struct{}
}

func (r *Resolver) register(tokens []string) *waiter {
	w := &waiter{tokens: tokens, wake: make(chan struct{}, 1)}
	r.waitersMu.Lock()
	defer r.waitersMu.Unlock()
	for _, t := range tokens {
		set := r.waiters[t]
		if set == nil {
			set = map[*waiter]struct{}{}
			r.waiters[t] = set
		}
		set[w] = struct{}{}
	}
	return w
}

func (r *Resolver) unregister(w *waiter) {
	r.waitersMu.Lock()
	defer r.waitersMu.Unlock()
	for _, t := range w.tokens {
		if set := r.waiters[t]; set != nil {
			delete(set, w)
			if len(set) == 0 {
				delete(r.waiters, t)
			}
		}
	}
}

// Wake wakes the events waiting for one of tokens (an announcement of stored facts).
func (r *Resolver) Wake(tokens []string) {
	r.waitersMu.Lock()
	defer r.waitersMu.Unlock()
	for _, t := range tokens {
		for w := range r.waiters[t] {
			select {
			case w.wake <- struct{}{}:
			default: // already woken, not yet looked
			}
		}
	}
}

// Subscribed is called when the announcement subscription is (re)established: waiting events
// stop polling, and all of them look once, since announcements made while it was down are lost.
func (r *Resolver) Subscribed() {
	r.subscribed.Store(true)
	r.Notify()
}

// Start subscribes to the announcements of the resolver's route until ctx ends, retrying with
// backoff; until the subscription is up, waiting events poll. Without Announcements or with
// attribution off it only waits for ctx.
func (r *Resolver) Start(ctx context.Context) error {
	if !r.Enabled() || r.cfg.Announcements == nil {
		<-ctx.Done()
		return nil
	}
	log := logf.FromContext(ctx).WithName("attribution")
	backoff := wait.Backoff{Duration: time.Second, Factor: 2, Cap: time.Minute, Steps: math.MaxInt32}
	for {
		err := r.cfg.Announcements.Subscribe(ctx, r.cfg.Route, r)
		if ctx.Err() != nil {
			return nil //nolint:nilerr // the manager is stopping: a subscription ended by it is no failure
		}
		r.subscribed.Store(false)
		d := backoff.Step()
		log.Error(err, "fact announcements unavailable; waiting changes poll Redis until the subscription is back", "retryIn", d)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(d):
		}
	}
}

// NeedLeaderElection is true: only the leader's watches wait for facts.
func (r *Resolver) NeedLeaderElection() bool { return true }
