package resync

import "sync"

// Guard orders the changes to one tenant's ACL user between the namespace controller and the
// resync rounds, user by user: there is no lock shared by every tenant, so one tenant's work
// (an edit loop, a node that makes its apply wait) never makes another tenant, or a round,
// wait.
//
// The controller holds a user with Lock while it records the user's new state on the Namespace
// and applies it. A round takes a Mark before it lists the tenants and then holds each listed
// user with TryHold, which refuses a user the controller holds or has changed since the mark:
// the round's listing of that user may be older than what the controller applied, and the
// controller applies it anyway. So a round never re-applies state a rotation or a revocation
// has just replaced, and never waits for the controller.
//
// A Guard keeps a user only while it matters: while it is held or waited for, or while a round
// that marked before its last change is still running. So the users of namespaces that are
// gone are not kept, and a round that listed a user before it was deleted still refuses it.
type Guard struct {
	mu     sync.Mutex
	seq    uint64
	users  map[string]*userGuard
	rounds map[uint64]int // marks of the rounds running → how many
}

type userGuard struct {
	mu      sync.Mutex
	refs    int    // callers holding or waiting for the user; under Guard.mu
	changed uint64 // Guard.seq when the controller last released the user; under Guard.mu
}

// ref returns the user name's guard, counting the caller in until unref.
func (g *Guard) ref(name string) *userGuard {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.users == nil {
		g.users = map[string]*userGuard{}
	}
	u, ok := g.users[name]
	if !ok {
		u = &userGuard{}
		g.users[name] = u
	}
	u.refs++
	return u
}

// unrefLocked counts a caller of ref out and lets the user go once nothing needs it. g.mu is
// held.
func (g *Guard) unrefLocked(name string, u *userGuard) {
	u.refs--
	if u.refs == 0 && !g.neededLocked(u) {
		delete(g.users, name)
	}
}

// neededLocked reports whether a running round marked before the user's last change: that
// round must go on refusing the user, so its change is remembered. g.mu is held.
func (g *Guard) neededLocked(u *userGuard) bool {
	for mark := range g.rounds {
		if u.changed > mark {
			return true
		}
	}
	return false
}

// Lock holds the user name for a change, waiting only for another change of the same user or a
// round that holds it. The returned func releases it and records that it changed.
func (g *Guard) Lock(name string) (unlock func()) {
	u := g.ref(name)
	u.mu.Lock()
	return func() {
		g.mu.Lock()
		g.seq++
		u.changed = g.seq
		g.unrefLocked(name, u)
		g.mu.Unlock()
		u.mu.Unlock()
	}
}

// Mark starts a round: it returns the point the round's listing starts from, to pass to
// TryHold, and done, to call when the round has ended.
func (g *Guard) Mark() (mark uint64, done func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.rounds == nil {
		g.rounds = map[uint64]int{}
	}
	mark = g.seq
	g.rounds[mark]++
	var once sync.Once
	return mark, func() { once.Do(func() { g.endRound(mark) }) }
}

// endRound forgets the round marked at mark, and the users only it still needed.
func (g *Guard) endRound(mark uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.rounds[mark]--; g.rounds[mark] == 0 {
		delete(g.rounds, mark)
	}
	for name, u := range g.users {
		if u.refs == 0 && !g.neededLocked(u) {
			delete(g.users, name)
		}
	}
}

// TryHold holds the user name for a round without waiting. It refuses (ok false) while the
// controller holds the user, and when the controller changed it after mark. Call it only
// between Mark and its done.
func (g *Guard) TryHold(name string, mark uint64) (release func(), ok bool) {
	u := g.ref(name)
	if !u.mu.TryLock() {
		g.mu.Lock()
		g.unrefLocked(name, u)
		g.mu.Unlock()
		return nil, false
	}
	g.mu.Lock()
	stale := u.changed > mark
	if stale {
		g.unrefLocked(name, u)
	}
	g.mu.Unlock()
	if stale {
		u.mu.Unlock()
		return nil, false
	}
	return func() {
		g.mu.Lock()
		g.unrefLocked(name, u)
		g.mu.Unlock()
		u.mu.Unlock()
	}, true
}

// len returns how many users the Guard keeps.
func (g *Guard) len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.users)
}
