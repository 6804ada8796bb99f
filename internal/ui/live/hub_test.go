package live

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/siteops/siteops/internal/ui/access"
)

// namespaceRights allows each user the namespaces listed for it.
type namespaceRights map[string][]string

func (r namespaceRights) Allowed(_ context.Context, p access.Person, c access.Check) bool {
	for _, ns := range r[p.User] {
		if ns == "*" || ns == c.Namespace {
			return true
		}
	}
	return false
}

func told(s *Subscription, within time.Duration) bool {
	select {
	case <-s.C:
		return true
	case <-time.After(within):
		return false
	}
}

func TestHubTellsOnlyWhoMayRead(t *testing.T) {
	h := NewHub(namespaceRights{"tenant-a": {"a"}, "admin": {"*"}}, map[string]access.Check{"Decofile": {Verb: "list", Resource: "decofiles"}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = h.Run(ctx) }()

	tenant, _ := h.Subscribe(access.Person{User: "tenant-a"}, "")
	admin, _ := h.Subscribe(access.Person{User: "admin"}, "")
	adminOnA, _ := h.Subscribe(access.Person{User: "admin"}, "a")

	h.Publish(Change{Kind: "Decofile", Namespace: "b", Name: "blog"})
	if !told(admin, time.Second) {
		t.Error("the admin was not told of a change in b")
	}
	if told(tenant, 100*time.Millisecond) {
		t.Error("tenant-a was told of a change in b, which it may not read")
	}
	if told(adminOnA, 10*time.Millisecond) {
		t.Error("a page of namespace a was told of a change in b")
	}
	h.Publish(Change{Kind: "Decofile", Namespace: "a", Name: "shop"})
	if !told(tenant, time.Second) || !told(adminOnA, time.Second) || !told(admin, time.Second) {
		t.Error("a change in a did not reach every page that shows a")
	}
	h.Publish(Change{Kind: "Secret", Namespace: "a", Name: "x"})
	if told(admin, 100*time.Millisecond) {
		t.Error("a change of a kind the hub does not show was told")
	}
}

func TestHubBoundsPagesAndCoalesces(t *testing.T) {
	h := NewHub(namespaceRights{"u": {"*"}}, map[string]access.Check{"Decofile": {}})
	p := access.Person{User: "u"}
	var subs []*Subscription
	for i := range MaxPerPerson {
		s, err := h.Subscribe(p, "")
		if err != nil {
			t.Fatalf("page %d: %v", i, err)
		}
		subs = append(subs, s)
	}
	if _, err := h.Subscribe(p, ""); !errors.Is(err, ErrTooMany) {
		t.Fatalf("page %d of one person: %v, want ErrTooMany", MaxPerPerson+1, err)
	}
	h.Unsubscribe(subs[0])
	h.Unsubscribe(subs[0])
	if _, err := h.Subscribe(p, ""); err != nil {
		t.Fatalf("after closing a page: %v", err)
	}

	// A page that never reads holds one signal, however many changes arrive.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = h.Run(ctx) }()
	for i := range 10 * queueLength {
		h.Publish(Change{Kind: "Decofile", Namespace: "a", Name: fmt.Sprint(i)})
	}
	time.Sleep(100 * time.Millisecond)
	if n := len(subs[1].C); n != 1 {
		t.Errorf("a page that does not read holds %d signals, want 1", n)
	}
}
