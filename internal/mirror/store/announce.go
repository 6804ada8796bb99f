package store

// Announcements wake the watch events waiting for their facts, instead of having them poll.
//
// After storing an audit batch, the receiver publishes one message on the route's channel
// listing what the batch stored, as wake tokens; every replica's resolver subscribes to its
// route and wakes exactly the events waiting for one of those tokens, which then read their
// facts once. Pub/sub was chosen over Redis Streams and keyspace notifications: the facts are
// already stored (keys with a TTL), so the wake-up only needs to be a hint — a stream would
// store every fact a second time and need trimming, and keyspace notifications need the
// server's notify-keyspace-events setting (often not allowed on managed Redis) and send one
// message per key to every subscriber. A message lost while a subscriber reconnects costs
// nothing but time: the subscriber wakes every waiting event when it is subscribed again, and
// every event looks once more when its grace period ends.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
)

// Wake token kinds: a token is "<kind> <group/resource> <value...>", space separated (none of
// the fields can hold a space).
const (
	tokenExact  = "e" // a fact for object <uid> at <rv>
	tokenObject = "o" // a uid-level fact (:last, deleter) for object <uid>
	tokenRV     = "v" // an rv-only fact
	tokenScope  = "s" // a collection delete's scope: <namespace>, "-" for the cluster scope
)

func token(kind, gr string, values ...string) string {
	return kind + " " + gr + " " + strings.Join(values, " ")
}

func scopeValue(namespace string) string {
	if namespace == "" {
		return "-"
	}
	return namespace
}

// WakeTokens are the tokens whose announcement may complete q's lookup.
func WakeTokens(q Query) []string {
	gr := groupResourceOf(q.GVR.Group, q.GVR.Resource)
	var out []string
	if q.UID != "" && q.RV != "" {
		out = append(out, token(tokenExact, gr, string(q.UID), q.RV))
	}
	if q.RV != "" {
		out = append(out, token(tokenRV, gr, q.RV))
	}
	if q.Removal {
		if q.UID != "" {
			out = append(out, token(tokenObject, gr, string(q.UID)))
		}
		if !q.At.IsZero() {
			out = append(out, token(tokenScope, gr, scopeValue(q.Namespace)))
		}
	}
	return out
}

// eventTokens are the tokens of what RecordFact and RecordDeleteCollectionFacts store for ev.
func eventTokens(ev *auditv1.Event) []string {
	if ev.ObjectRef == nil || ev.ObjectRef.Resource == "" {
		return nil
	}
	gr := groupResourceOf(ev.ObjectRef.APIGroup, ev.ObjectRef.Resource)
	if ev.Verb == verbDeleteCollection {
		items, listed := deletedItems(ev)
		var out []string
		for _, it := range items {
			if it.Metadata.UID != "" {
				out = append(out, token(tokenObject, gr, it.Metadata.UID))
			}
		}
		if !listed || (len(items) > 0 && len(out) == 0) {
			out = append(out, token(tokenScope, gr, scopeValue(ev.ObjectRef.Namespace)))
		}
		return out
	}
	meta := responseMeta(ev).Metadata
	uid := meta.UID
	if uid == "" {
		uid = string(ev.ObjectRef.UID)
	}
	switch {
	case uid != "" && meta.ResourceVersion != "":
		return []string{token(tokenExact, gr, uid, meta.ResourceVersion), token(tokenObject, gr, uid)}
	case uid != "":
		return []string{token(tokenObject, gr, uid)}
	case meta.ResourceVersion != "":
		return []string{token(tokenRV, gr, meta.ResourceVersion)}
	}
	return nil
}

// announceChannel is the pub/sub channel of one route.
func (a *AttributionIndex) announceChannel(route string) string {
	return a.prefix + ":author:v1:audit:route:" + escapeKeyField(route) + ":announce"
}

// Announce publishes, in one message, the wake tokens of the facts stored for events (already
// recorded). It is a hint: a failure only makes waiting events find their facts later.
func (a *AttributionIndex) Announce(ctx context.Context, route string, events []auditv1.Event) error {
	var tokens []string
	for i := range events {
		tokens = append(tokens, eventTokens(&events[i])...)
	}
	if len(tokens) == 0 {
		return nil
	}
	if err := a.client.Publish(ctx, a.announceChannel(route), strings.Join(tokens, "\n")).Err(); err != nil {
		return fmt.Errorf("announce %d attribution facts on route %s: %w", len(tokens), route, err)
	}
	return nil
}

// AnnouncementHandler receives a route's announcements.
type AnnouncementHandler interface {
	// Wake is called with the tokens of each announcement.
	Wake(tokens []string)
	// Subscribed is called each time the subscription is established, first and after every
	// reconnection: announcements made while it was down are lost, so everything waiting
	// should look again.
	Subscribed()
}

// Subscribe delivers route's announcements to h until ctx ends. It uses a connection of its own
// from the store's client; go-redis pings it when idle and reconnects and re-subscribes when it
// breaks. The channel name follows the key prefix, so an ACL user limited to the prefix's keys
// also needs the channel pattern (&<prefix>:*).
func (a *AttributionIndex) Subscribe(ctx context.Context, route string, h AnnouncementHandler) error {
	ps := a.client.Subscribe(ctx, a.announceChannel(route))
	defer func() { _ = ps.Close() }()
	ch := ps.ChannelWithSubscriptions(redis.WithChannelSize(1000), redis.WithChannelHealthCheckInterval(5*time.Second))
	for {
		select {
		case <-ctx.Done():
			return nil
		case m, ok := <-ch:
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return errors.New("attribution announcements: subscription closed")
			}
			switch m := m.(type) {
			case *redis.Subscription:
				if m.Kind == "subscribe" {
					h.Subscribed()
				}
			case *redis.Message:
				h.Wake(strings.Split(m.Payload, "\n"))
			}
		}
	}
}
