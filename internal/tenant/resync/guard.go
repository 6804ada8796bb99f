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
type Guard struct {
	mu    sync.Mutex
	seq   uint64
	users map[string]*userGuard
}

type userGuard struct {
	mu      sync.Mutex
	changed uint64 // Guard.seq when the controller last released the user
}

func (g *Guard) user(name string) *userGuard {
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
	return u
}

// Lock holds the user name for a change, waiting only for another change of the same user or a
// round that holds it. The returned func releases it and records that it changed.
func (g *Guard) Lock(name string) (unlock func()) {
	u := g.user(name)
	u.mu.Lock()
	return func() {
		g.mu.Lock()
		g.seq++
		u.changed = g.seq
		g.mu.Unlock()
		u.mu.Unlock()
	}
}

// Mark returns the point a round's listing starts from; pass it to TryHold.
func (g *Guard) Mark() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.seq
}

// TryHold holds the user name for a round without waiting. It refuses (ok false) while the
// controller holds the user, and when the controller changed it after mark.
func (g *Guard) TryHold(name string, mark uint64) (release func(), ok bool) {
	u := g.user(name)
	if !u.mu.TryLock() {
		return nil, false
	}
	g.mu.Lock()
	stale := u.changed > mark
	g.mu.Unlock()
	if stale {
		u.mu.Unlock()
		return nil, false
	}
	return u.mu.Unlock, true
}
