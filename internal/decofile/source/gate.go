package source

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Defaults of a Gate.
const (
	// DefaultPerRemote is how many retrievals from one remote run at once: half of the delivery
	// controller's default four retrievals, so a remote that hangs leaves the other half to the rest.
	DefaultPerRemote = 2
	// DefaultPerTenant is how many retrievals run at once for one tenant, whatever their
	// remotes: half of the default retrievals, so one tenant's hanging remotes leave the other
	// half to the rest.
	DefaultPerTenant = 2
	// perTenantRemote is how many retrievals from one remote run at once for one tenant, so one
	// tenant's slow repositories on a remote that others use hold one of its slots.
	perTenantRemote = 1
	// DefaultSlowAfter is how long every slot of a remote may be held before further retrievals
	// from it stop waiting for one.
	DefaultSlowAfter = 2 * time.Second
	// DefaultHangAfter is how long a retrieval may take before its tenant counts as hanging
	// (see Gate): far longer than any repository of a site takes to download.
	DefaultHangAfter = 15 * time.Second
	// hangingSlots is how many retrievals of hanging tenants run at once, all remotes and
	// tenants together.
	hangingSlots = 1
)

// ErrRemoteBusy is wrapped by the error of a retrieval that did not start because its remote
// already has Gate.PerRemote retrievals in flight and is slow (see Gate).
var ErrRemoteBusy = errors.New("remote busy")

// Gate bounds the retrievals in flight per remote, so a remote that answers slowly or not at
// all cannot hold every worker of the delivery controller while the Decofiles of healthy
// remotes wait. A retrieval waits for a slot of its remote only while that remote looks
// healthy: once every slot has been held for SlowAfter, or a retrieval for the same tenant that
// ended in the last minute took that long, further retrievals fail at once with a transient error wrapping
// ErrRemoteBusy (the workqueue retries them with backoff) and their worker moves on to other
// Decofiles.
//
// A retrieval made for a tenant (WithTenant: the Decofile's namespace) is also bounded per
// tenant: PerTenant at once in all, one at a time from each remote, and a tenant whose last
// retrieval from a remote took SlowAfter or longer is slow there for a minute: its retrievals
// may then hold at most PerRemote−1 of the remote's slots together with those of other slow
// tenants, and never wait. So one tenant's slow repositories on a git host that many tenants
// use leave the others a slot, and its hanging remotes leave the others workers.
//
// A tenant whose retrieval from any remote took HangAfter or longer is hanging for ten minutes,
// on every remote: the retrievals of all hanging tenants together hold one slot at a time, and
// never wait. So tenants whose remotes hang (or their own hosts trickle bytes until the timeout)
// hold the delivery workers for one timeout, not again and again. The zero value uses the
// defaults.
type Gate struct {
	// PerRemote is the most retrievals from one remote at once; 0 means DefaultPerRemote.
	PerRemote int
	// PerTenant is the most retrievals at once for one tenant; 0 means DefaultPerTenant.
	PerTenant int
	// SlowAfter is how long every slot of a remote may be held before retrievals stop waiting
	// for one; 0 means DefaultSlowAfter.
	SlowAfter time.Duration
	// HangAfter is how long a retrieval may take before its tenant counts as hanging; 0 means
	// DefaultHangAfter.
	HangAfter time.Duration

	mu      sync.Mutex
	remotes map[string]*remoteSlots
	// hangingUntil, per tenant: a retrieval of the tenant took HangAfter or longer.
	hangingUntil map[string]time.Time
	freed        chan struct{}    // closed (and replaced) when any slot is released
	now          func() time.Time // for tests of the logic; nil means time.Now
}

// remoteSlots are the retrievals in flight to one remote.
type remoteSlots struct {
	started map[int64]slot // slot id → its retrieval
	next    int64
	// slowUntil, per tenant ("" for retrievals made for none): a retrieval of that tenant
	// that ended recently took SlowAfter or longer, so the remote is slow for it although its
	// retrievals in flight are young (each one of a series of slow requests starts young).
	slowUntil map[string]time.Time
}

// slot is one retrieval in flight.
type slot struct {
	tenant  string
	started time.Time
	// suspect: its tenant was slow on the remote when it started.
	suspect bool
	// hanging: its tenant was hanging when it started.
	hanging bool
}

// tenantKey is the context key of WithTenant.
type tenantKey struct{}

// WithTenant returns ctx for retrievals made for tenant (a namespace): the Gate bounds them per
// tenant too.
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

func tenantOf(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

// slowMemory is how long a remote counts as slow after a retrieval took SlowAfter or longer,
// unless one ends in less first.
const slowMemory = time.Minute

// hangMemory is how long a tenant counts as hanging after a retrieval took HangAfter or longer.
const hangMemory = 10 * time.Minute

// maxIdleRemotes bounds the remotes remembered as slow with nothing in flight, and the tenants
// remembered as hanging.
const maxIdleRemotes = 1024

func (g *Gate) limit() int {
	if g.PerRemote > 0 {
		return g.PerRemote
	}
	return DefaultPerRemote
}

func (g *Gate) perTenant() int {
	if g.PerTenant > 0 {
		return g.PerTenant
	}
	return DefaultPerTenant
}

func (g *Gate) slowAfter() time.Duration {
	if g.SlowAfter > 0 {
		return g.SlowAfter
	}
	return DefaultSlowAfter
}

func (g *Gate) hangAfter() time.Duration {
	if g.HangAfter > 0 {
		return g.HangAfter
	}
	return DefaultHangAfter
}

func (g *Gate) clock() time.Time {
	if g.now != nil {
		return g.now()
	}
	return time.Now()
}

// Acquire takes a slot of remote (a key naming it, such as scheme://host:port) for one
// retrieval, made for the tenant of ctx (WithTenant), and returns its release. target names
// the remote in the error.
func (g *Gate) Acquire(ctx context.Context, remote, target string) (release func(), err error) {
	tenant := tenantOf(ctx)
	for {
		g.mu.Lock()
		if g.remotes == nil {
			g.remotes, g.freed = map[string]*remoteSlots{}, make(chan struct{})
			g.hangingUntil = map[string]time.Time{}
		}
		rs := g.remotes[remote]
		now := g.clock()
		if rs == nil {
			if len(g.remotes) >= maxIdleRemotes {
				g.sweep(now)
			}
			rs = &remoteSlots{started: map[int64]slot{}, slowUntil: map[string]time.Time{}}
			g.remotes[remote] = rs
		}
		wait, refusal := g.decide(rs, tenant, now)
		if wait == 0 && refusal == "" {
			id := rs.next
			rs.next++
			rs.started[id] = slot{tenant: tenant, started: now, suspect: rs.slowUntil[tenant].After(now), hanging: g.hanging(tenant, now)}
			g.mu.Unlock()
			var once sync.Once
			return func() { once.Do(func() { g.release(remote, id) }) }, nil
		}
		freed := g.freed
		n := len(rs.started)
		g.mu.Unlock()
		if refusal != "" {
			return nil, errorf(ReasonUnavailable, true, "%s is slow to answer: %s; "+
				"not waiting for one to end, so other Decofiles are served (retrying with backoff): %w", target, refusal, ErrRemoteBusy)
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

// tenantInFlight is how many retrievals of tenant are in flight from any remote, and when the
// youngest of them started.
func (g *Gate) tenantInFlight(tenant string) (n int, youngest time.Time) {
	for _, rs := range g.remotes {
		for _, s := range rs.started {
			if s.tenant == tenant {
				n++
				if s.started.After(youngest) {
					youngest = s.started
				}
			}
		}
	}
	return n, youngest
}

// hanging reports whether a retrieval of tenant took HangAfter or longer lately.
func (g *Gate) hanging(tenant string, now time.Time) bool {
	return tenant != "" && g.hangingUntil[tenant].After(now)
}

// hangingInFlight is how many retrievals of hanging tenants are in flight, from any remote.
func (g *Gate) hangingInFlight() int {
	n := 0
	for _, rs := range g.remotes {
		for _, s := range rs.started {
			if s.hanging {
				n++
			}
		}
	}
	return n
}

// decide says whether a retrieval for tenant may take a slot of rs now (both zero), should
// wait up to wait for one to be freed, or is refused (refusal says why).
func (g *Gate) decide(rs *remoteSlots, tenant string, now time.Time) (wait time.Duration, refusal string) {
	if g.hanging(tenant, now) && g.hangingInFlight() >= hangingSlots {
		return 0, fmt.Sprintf("a retrieval of this namespace took %s or more lately, and the slot such namespaces share is taken", g.hangAfter())
	}
	slowAfter := g.slowAfter()
	slow := rs.slowUntil[tenant].After(now)
	var mine, suspects int
	var youngest, myYoungest time.Time
	for _, s := range rs.started {
		if s.started.After(youngest) {
			youngest = s.started
		}
		if s.suspect {
			suspects++
		}
		if tenant != "" && s.tenant == tenant {
			mine++
			if s.started.After(myYoungest) {
				myYoungest = s.started
			}
		}
	}
	full := len(rs.started) >= g.limit()
	if tenant != "" {
		if mine >= perTenantRemote {
			// The tenant's own slot of this remote is taken: wait only for a retrieval that
			// answers in time.
			if wait = myYoungest.Add(slowAfter).Sub(now); wait <= 0 || slow {
				return 0, fmt.Sprintf("%d retrievals of this namespace from it are in flight and they take %s or more", mine, slowAfter)
			}
			return wait, ""
		}
		if all, since := g.tenantInFlight(tenant); all >= g.perTenant() {
			if wait = since.Add(slowAfter).Sub(now); wait <= 0 {
				return 0, fmt.Sprintf("this namespace has %d retrievals in flight, from any remote, and they take %s or more", all, slowAfter)
			}
			return wait, ""
		}
		if slow && (full || suspects >= g.limit()-1) {
			// Slow retrievals leave one slot to the tenants whose retrievals answer in time.
			return 0, fmt.Sprintf("retrievals of this namespace from it took %s or more lately, and slow retrievals hold the slots they may use", slowAfter)
		}
	}
	if !full {
		return 0, ""
	}
	// Full: wait while the youngest retrieval in flight is younger than SlowAfter and none
	// that ended lately took that long, since a healthy remote frees a slot soon; otherwise the
	// remote is slow and waiting would only hold this worker too.
	if wait = youngest.Add(slowAfter).Sub(now); wait <= 0 || slow {
		return 0, fmt.Sprintf("%d retrievals from it are in flight and they take %s or more", len(rs.started), slowAfter)
	}
	return wait, ""
}

func (g *Gate) release(remote string, id int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	rs := g.remotes[remote]
	if rs == nil {
		return
	}
	now := g.clock()
	s := rs.started[id]
	if s.tenant != "" && now.Sub(s.started) >= g.hangAfter() {
		g.hangingUntil[s.tenant] = now.Add(hangMemory)
	}
	if now.Sub(s.started) >= g.slowAfter() {
		rs.slowUntil[s.tenant] = now.Add(slowMemory)
	} else {
		delete(rs.slowUntil, s.tenant)
	}
	delete(rs.started, id)
	close(g.freed)
	g.freed = make(chan struct{})
	if len(g.hangingUntil) > maxIdleRemotes {
		for t, until := range g.hangingUntil {
			if !until.After(now) {
				delete(g.hangingUntil, t)
			}
		}
	}
	for t, until := range rs.slowUntil {
		if !until.After(now) {
			delete(rs.slowUntil, t)
		}
	}
	if rs.idle(now) {
		delete(g.remotes, remote) // bounded by the remotes in flight and those lately slow
	}
}

// idle reports whether rs has nothing in flight and no tenant slow on it.
func (rs *remoteSlots) idle(now time.Time) bool {
	if len(rs.started) > 0 {
		return false
	}
	for _, until := range rs.slowUntil {
		if until.After(now) {
			return false
		}
	}
	return true
}

// sweep forgets the remotes with nothing in flight whose slowness is no longer remembered.
func (g *Gate) sweep(now time.Time) {
	for k, rs := range g.remotes {
		if rs.idle(now) {
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
