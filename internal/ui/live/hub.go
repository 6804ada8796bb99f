// Package live fans the changes of shared informers out to the UI's open pages: one watch per
// kind for everyone, each page told only of changes its person may read, with a bounded cost per
// page (one pending signal, never a queue of objects).
package live

import (
	"context"
	"errors"
	"sync"

	"github.com/siteops/siteops/internal/ui/access"
)

// Change names an object that changed.
type Change struct {
	// Kind is the changed object's kind (Decofile, GitTarget, WatchRule, Namespace).
	Kind string
	// Namespace of the object; for a Namespace, its own name.
	Namespace string
	// Name of the object.
	Name string
}

// Limits of the hub.
const (
	// MaxPerPerson is how many pages one person may keep open.
	MaxPerPerson = 20
	// MaxSubscribers is how many pages the hub serves at once.
	MaxSubscribers = 2000
	// queueLength bounds the changes waiting to be fanned out; past it, every page is told.
	queueLength = 4096
)

// ErrTooMany is returned when a person or the hub has too many open pages.
var ErrTooMany = errors.New("too many live pages open: close some and reload")

// Allower is what the hub asks before it tells a page of a change.
type Allower interface {
	Allowed(ctx context.Context, p access.Person, c access.Check) bool
}

// Subscription is one open page.
type Subscription struct {
	person    access.Person
	namespace string
	// C receives a value when something the page shows may have changed; it holds at most one,
	// so a slow page costs nothing while it catches up.
	C chan struct{}
}

// Hub fans changes out to subscriptions.
type Hub struct {
	allow  Allower
	checks map[string]access.Check
	queue  chan Change
	// overflow is set when changes were dropped: every page is told once.
	overflow chan struct{}

	mu       sync.Mutex
	subs     map[*Subscription]struct{}
	byPerson map[string]int
}

// NewHub makes a hub; checks maps each kind to the read check a page's person must pass to hear
// of its changes (the Namespace field is filled from the change).
func NewHub(allow Allower, checks map[string]access.Check) *Hub {
	return &Hub{allow: allow, checks: checks, queue: make(chan Change, queueLength), overflow: make(chan struct{}, 1),
		subs: map[*Subscription]struct{}{}, byPerson: map[string]int{}}
}

// Subscribe opens a page for p: namespace limits it to one namespace's changes ("" for all).
func (h *Hub) Subscribe(p access.Person, namespace string) (*Subscription, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.subs) >= MaxSubscribers || h.byPerson[p.User] >= MaxPerPerson {
		return nil, ErrTooMany
	}
	s := &Subscription{person: p, namespace: namespace, C: make(chan struct{}, 1)}
	h.subs[s] = struct{}{}
	h.byPerson[p.User]++
	return s, nil
}

// Unsubscribe closes a page.
func (h *Hub) Unsubscribe(s *Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[s]; !ok {
		return
	}
	delete(h.subs, s)
	if h.byPerson[s.person.User]--; h.byPerson[s.person.User] <= 0 {
		delete(h.byPerson, s.person.User)
	}
}

// Subscribers is the number of open pages.
func (h *Hub) Subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// Publish queues a change without blocking the informer that saw it.
func (h *Hub) Publish(c Change) {
	select {
	case h.queue <- c:
	default:
		select {
		case h.overflow <- struct{}{}:
		default:
		}
	}
}

// Run fans queued changes out until ctx is done.
func (h *Hub) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-h.overflow:
			for _, s := range h.snapshot() {
				notify(s)
			}
		case c := <-h.queue:
			h.fanOut(ctx, c)
		}
	}
}

func (h *Hub) snapshot() []*Subscription {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*Subscription, 0, len(h.subs))
	for s := range h.subs {
		out = append(out, s)
	}
	return out
}

// fanOut tells each page that shows c's namespace and whose person may read c.
func (h *Hub) fanOut(ctx context.Context, c Change) {
	check, ok := h.checks[c.Kind]
	if !ok {
		return
	}
	check.Namespace = c.Namespace
	for _, s := range h.snapshot() {
		if s.namespace != "" && s.namespace != c.Namespace {
			continue
		}
		if len(s.C) > 0 {
			continue // already told; the page reads everything again anyway
		}
		if h.allow.Allowed(ctx, s.person, check) {
			notify(s)
		}
	}
}

func notify(s *Subscription) {
	select {
	case s.C <- struct{}{}:
	default:
	}
}
