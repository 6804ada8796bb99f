package attribution

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// streamID names one watch of a GitTarget.
type streamID struct {
	gvr       schema.GroupVersionResource
	namespace string
}

// track remembers the ordering domain of one watch of target; a restarted watch replaces it.
func (r *Resolver) track(target types.NamespacedName, id streamID, s *Stream) {
	r.streamsMu.Lock()
	defer r.streamsMu.Unlock()
	if r.streams == nil {
		r.streams = map[types.NamespacedName]map[streamID]*Stream{}
	}
	if r.streams[target] == nil {
		r.streams[target] = map[streamID]*Stream{}
	}
	r.streams[target][id] = s
}

// EndStream lets go of the watch of target's gvr in namespace, which stopped: the stream and the
// writer it hands ops to are no longer held for Settle. It has the shape of the mirror engine's
// StreamEndHook.
func (r *Resolver) EndStream(target types.NamespacedName, gvr schema.GroupVersionResource, namespace string) {
	r.streamsMu.Lock()
	defer r.streamsMu.Unlock()
	delete(r.streams[target], streamID{gvr, namespace})
	if len(r.streams[target]) == 0 {
		delete(r.streams, target)
	}
}

// Streams is how many watch streams are held for Settle.
func (r *Resolver) Streams() int {
	r.streamsMu.Lock()
	defer r.streamsMu.Unlock()
	n := 0
	for _, byID := range r.streams {
		n += len(byID)
	}
	return n
}

// Settle waits until every event target's watches received so far has reached the writer (its
// author resolved, or its grace period over), at most the grace period plus a margin, so a
// CommitRequest closes a window that holds the changes made just before it. It returns early
// when ctx ends; with attribution off it returns at once.
func (r *Resolver) Settle(ctx context.Context, target types.NamespacedName) {
	if !r.Enabled() {
		return
	}
	r.streamsMu.Lock()
	var streams []*Stream
	for _, s := range r.streams[target] {
		streams = append(streams, s)
	}
	r.streamsMu.Unlock()
	deadline := time.Now().Add(r.cfg.Grace + time.Second)
	for _, s := range streams {
		for s.Pending() > 0 && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		// A hand-over marks its ops delivered before it enqueues them; it holds deliver
		// until they are in the writer's queue.
		s.deliver.Lock()
		s.deliver.Unlock() //nolint:staticcheck // an empty critical section waits for a hand-over
	}
}
