package source

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Defaults of a Gate.
const (
	// DefaultPerRemote is how many retrievals from one remote run at once: half of the delivery
	// controller's default four workers, so a remote that hangs leaves the other half to the rest.
	DefaultPerRemote = 2
	// DefaultSlowAfter is how long every slot of a remote may be held before further retrievals
	// from it stop waiting for one.
	DefaultSlowAfter = 2 * time.Second
)

// ErrRemoteBusy is wrapped by the error of a retrieval that did not start because its remote
// already has Gate.PerRemote retrievals in flight and is slow (see Gate).
var ErrRemoteBusy = errors.New("remote busy")

// Gate bounds the retrievals in flight per remote, so a remote that answers slowly or not at
// all cannot hold every worker of the delivery controller while the Decofiles of healthy
// remotes wait. A retrieval waits for a slot of its remote only while that remote looks
// healthy: once every slot has been held for SlowAfter, or a retrieval that ended in the last
// minute took that long, further retrievals fail at once with a transient error wrapping
// ErrRemoteBusy (the workqueue retries them with backoff) and their worker moves on to other
// Decofiles. The zero value uses the defaults.
type Gate struct {
	// PerRemote is the most retrievals from one remote at once; 0 means DefaultPerRemote.
	PerRemote int
	// SlowAfter is how long every slot of a remote may be held before retrievals stop waiting
	// for one; 0 means DefaultSlowAfter.
	SlowAfter time.Duration

	mu      sync.Mutex
	remotes map[string]*remoteSlots
	now     func() time.Time // for tests of the logic; nil means time.Now
}

// remoteSlots are the retrievals in flight to one remote.
type remoteSlots struct {
	started map[int64]time.Time // slot id → when its retrieval started
	next    int64
	freed   chan struct{} // closed (and replaced) when a slot is released
	// slowUntil: a retrieval that ended recently took SlowAfter or longer, so the remote is
	// slow although the retrievals in flight are young (each one of a series of slow requests
	// starts young).
	slowUntil time.Time
}

// slowMemory is how long a remote counts as slow after a retrieval took SlowAfter or longer,
// unless one ends in less first.
const slowMemory = time.Minute

// maxIdleRemotes bounds the remotes remembered as slow with nothing in flight.
const maxIdleRemotes = 1024

func (g *Gate) limit() int {
	if g.PerRemote > 0 {
		return g.PerRemote
	}
	return DefaultPerRemote
}

func (g *Gate) slowAfter() time.Duration {
	if g.SlowAfter > 0 {
		return g.SlowAfter
	}
	return DefaultSlowAfter
}

func (g *Gate) clock() time.Time {
	if g.now != nil {
		return g.now()
	}
	return time.Now()
}

// Acquire takes a slot of remote (a key naming it, such as scheme://host:port) for one
// retrieval and returns its release. target names the remote in the error.
func (g *Gate) Acquire(ctx context.Context, remote, target string) (release func(), err error) {
	for {
		g.mu.Lock()
		if g.remotes == nil {
			g.remotes = map[string]*remoteSlots{}
		}
		rs := g.remotes[remote]
		now := g.clock()
		if rs == nil {
			if len(g.remotes) >= maxIdleRemotes {
				g.sweep(now)
			}
			rs = &remoteSlots{started: map[int64]time.Time{}, freed: make(chan struct{})}
			g.remotes[remote] = rs
		}
		if len(rs.started) < g.limit() {
			id := rs.next
			rs.next++
			rs.started[id] = now
			g.mu.Unlock()
			var once sync.Once
			return func() { once.Do(func() { g.release(remote, id) }) }, nil
		}
		// Full: wait while the youngest retrieval in flight is younger than SlowAfter and none
		// that ended lately took that long, since a healthy remote frees a slot soon; otherwise
		// the remote is slow and waiting would only hold this worker too.
		var youngest time.Time
		for _, s := range rs.started {
			if s.After(youngest) {
				youngest = s
			}
		}
		wait := youngest.Add(g.slowAfter()).Sub(now)
		freed := rs.freed
		n := len(rs.started)
		slow := wait <= 0 || rs.slowUntil.After(now)
		g.mu.Unlock()
		if slow {
			return nil, errorf(ReasonUnavailable, true, "%s is slow to answer: %d retrievals from it are in flight and they take %s or more; "+
				"not waiting for one to end, so the Decofiles of other remotes are served (retrying with backoff): %w", target, n, g.slowAfter(), ErrRemoteBusy)
		}
		t := time.NewTimer(wait)
		select {
		case <-freed:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, errorf(ReasonUnavailable, true, "%s: gave up waiting for one of its %d retrievals in flight to end: %w", target, n, ctx.Err())
		}
		t.Stop()
	}
}

func (g *Gate) release(remote string, id int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	rs := g.remotes[remote]
	if rs == nil {
		return
	}
	now := g.clock()
	if now.Sub(rs.started[id]) >= g.slowAfter() {
		rs.slowUntil = now.Add(slowMemory)
	} else {
		rs.slowUntil = time.Time{}
	}
	delete(rs.started, id)
	close(rs.freed)
	rs.freed = make(chan struct{})
	if len(rs.started) == 0 && !rs.slowUntil.After(now) {
		delete(g.remotes, remote) // bounded by the remotes in flight and those lately slow
	}
}

// sweep forgets the remotes with nothing in flight whose slowness is no longer remembered.
func (g *Gate) sweep(now time.Time) {
	for k, rs := range g.remotes {
		if len(rs.started) == 0 && !rs.slowUntil.After(now) {
			delete(g.remotes, k)
		}
	}
}

// InFlight is how many retrievals from remote hold a slot now.
func (g *Gate) InFlight(remote string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if rs := g.remotes[remote]; rs != nil {
		return len(rs.started)
	}
	return 0
}

// acquire is Acquire for a source of kind (git, github), counting a refusal in
// siteops_decofile_source_remote_busy_total.
func (g *Gate) acquire(ctx context.Context, kind, remote, target string) (release func(), err error) {
	release, err = g.Acquire(ctx, remote, target)
	if errors.Is(err, ErrRemoteBusy) {
		busyTotal.WithLabelValues(kind).Inc()
	}
	return release, err
}

// orOwn is g, or own (a zero Gate: the defaults) when g is nil.
func orOwn(g, own *Gate) *Gate {
	if g != nil {
		return g
	}
	return own
}
