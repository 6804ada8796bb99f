// Package feed shares one cluster-wide watch per resource among all of the mirror's streams, so
// the API server holds one watch per resource type however many GitTargets and namespaces are
// mirrored. Each stream subscribes from its own resourceVersion and gets every change of its
// namespace after it, in order and once. A stream that joins behind the shared watch's position
// (a cursor after a restart) makes the shared watch start again from that position, at most
// once a second for all who joined meanwhile; the API server's watch cache sends the changes
// since then again and each stream skips those it already has. A stream that falls behind is
// let go, never waited for, and reconnects from where it stood.
package feed

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/siteops/siteops/internal/mirror/metrics"
)

// Defaults for Feeds.
const (
	// DefaultQueueLimit is how many events a subscriber may hold undelivered before it is let go.
	DefaultQueueLimit = 4096
)

// Feeds hands out watches served from one shared watch per resource. Its zero value is not
// usable; call New.
type Feeds struct {
	client dynamic.Interface
	// QueueLimit bounds the events one subscriber holds; past it the subscriber is let go.
	QueueLimit int

	mu    sync.Mutex
	feeds map[schema.GroupVersionResource]*feed
}

// New returns Feeds reading through client.
func New(client dynamic.Interface) *Feeds {
	return &Feeds{client: client, QueueLimit: DefaultQueueLimit, feeds: map[schema.GroupVersionResource]*feed{}}
}

// Open reports the shared watches currently running, by resource.
func (fs *Feeds) Open() map[schema.GroupVersionResource]int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	out := make(map[schema.GroupVersionResource]int, len(fs.feeds))
	for gvr, f := range fs.feeds {
		f.mu.Lock()
		out[gvr] = len(f.subs)
		f.mu.Unlock()
	}
	return out
}

// Watch returns a watch of gvr's objects in namespace ("" for all namespaces, or a
// cluster-scoped resource) with every change after resourceVersion rv, in order, bookmarks
// included. It ends when ctx does, when Stop is called, or when the shared watch ends or the
// subscriber falls behind (the result channel closes; watch again from the last resourceVersion
// seen). A position the API server no longer has is reported as a 410 Gone error event.
func (fs *Feeds) Watch(ctx context.Context, gvr schema.GroupVersionResource, namespace, rv string) (watch.Interface, error) {
	if _, err := resourceversion.CompareResourceVersion(rv, rv); err != nil {
		// Not a position that can be compared (never the case for a resourceVersion the API
		// server gave): watch directly.
		return fs.direct(ctx, gvr, namespace, rv)
	}
	fs.mu.Lock()
	running := fs.feeds[gvr] != nil
	fs.mu.Unlock()
	pos := ""
	if !running {
		// Asked without holding the lock: a slow API server must not hold up other resources.
		var err error
		if pos, err = fs.currentPosition(ctx, gvr); err != nil {
			if apierrors.IsForbidden(err) && namespace != "" {
				// The manager may read this resource in some namespaces only: watch them one by one.
				return fs.direct(ctx, gvr, namespace, rv)
			}
			return nil, err
		}
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f := fs.feeds[gvr]
	if f == nil {
		f = fs.start(gvr, pos)
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &sub{fs: fs, feed: f, ns: namespace, from: rv, handed: rv, out: make(chan watch.Event), wake: make(chan struct{}, 1), ctx: ctx, cancel: cancel}
	f.join(s)
	metrics.WatchSubscribers.Inc()
	go s.run()
	return s, nil
}

// direct is a watch of the API server's own, not shared, for what the shared watch cannot serve.
func (fs *Feeds) direct(ctx context.Context, gvr schema.GroupVersionResource, namespace, rv string) (watch.Interface, error) {
	all := fs.client.Resource(gvr)
	var r dynamic.ResourceInterface = all
	if namespace != "" {
		r = all.Namespace(namespace)
	}
	return r.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: watchTimeout()})
}

// currentPosition is the resourceVersion a new shared watch starts from: now, without the
// current objects (a watch from no position would send them all). A consistent list also
// brings the API server's watch cache up to it, so the cache's next bookmarks pass it.
func (fs *Feeds) currentPosition(ctx context.Context, gvr schema.GroupVersionResource) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	l, err := fs.client.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return "", err
	}
	return l.GetResourceVersion(), nil
}

// start runs a shared watch of gvr from pos; the caller holds fs.mu.
func (fs *Feeds) start(gvr schema.GroupVersionResource, pos string) *feed {
	ctx, cancel := context.WithCancel(context.Background())
	f := &feed{fs: fs, gvr: gvr, pos: pos, subs: map[*sub]struct{}{}, byNS: map[string]map[*sub]struct{}{}, cancel: cancel, behind: make(chan struct{}, 1)}
	fs.feeds[gvr] = f
	metrics.SharedWatches.Inc()
	go f.run(ctx)
	return f
}

// leave removes s from its feed and stops the feed when no one is left.
func (fs *Feeds) leave(s *sub) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f := s.feed
	f.mu.Lock()
	member := f.remove(s)
	empty := len(f.subs) == 0 && !f.ended
	f.mu.Unlock()
	if member {
		metrics.WatchSubscribers.Dec()
	}
	if empty && fs.feeds[f.gvr] == f {
		delete(fs.feeds, f.gvr)
		f.cancel()
	}
}

// end takes f out of service; its subscribers' watches close once they delivered what they hold.
func (fs *Feeds) end(f *feed) {
	fs.mu.Lock()
	if fs.feeds[f.gvr] == f {
		delete(fs.feeds, f.gvr)
	}
	f.mu.Lock()
	f.ended = true
	subs := make([]*sub, 0, len(f.subs))
	for s := range f.subs {
		subs = append(subs, s)
	}
	clear(f.subs)
	clear(f.byNS)
	f.mu.Unlock()
	fs.mu.Unlock()
	metrics.WatchSubscribers.Sub(float64(len(subs)))
	for _, s := range subs {
		s.close()
	}
}

// watchTimeout spreads the server-side timeouts of long watches, so they do not all reconnect
// at once.
func watchTimeout() *int64 {
	t := int64(300 + rand.IntN(300))
	return &t
}

// feed is the shared watch of one resource.
type feed struct {
	fs     *Feeds
	gvr    schema.GroupVersionResource
	cancel context.CancelFunc
	// behind is signalled when a subscriber joined behind pos.
	behind chan struct{}

	mu    sync.Mutex
	pos   string // every event up to here was handed to the subscribers following then
	subs  map[*sub]struct{}
	byNS  map[string]map[*sub]struct{} // subs by namespace ("" for all namespaces)
	ended bool
	// rewound holds the subscribers the running watch started again for, and the position it
	// started from before, until the API server accepted the earlier position.
	rewound     []*sub
	rewoundFrom string
}

// remove takes s out of the feed's subscribers and reports whether it was one; the caller
// holds f.mu.
func (f *feed) remove(s *sub) bool {
	if _, ok := f.subs[s]; !ok {
		return false
	}
	delete(f.subs, s)
	if m := f.byNS[s.ns]; m != nil {
		delete(m, s)
		if len(m) == 0 {
			delete(f.byNS, s.ns)
		}
	}
	return true
}

// join registers s. A subscriber behind the feed's position waits, handed nothing, until the
// feed starts again from its position.
func (f *feed) join(s *sub) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.subs[s] = struct{}{}
	if f.byNS[s.ns] == nil {
		f.byNS[s.ns] = map[*sub]struct{}{}
	}
	f.byNS[s.ns][s] = struct{}{}
	if before(s.from, f.pos) {
		s.waiting = true
		select {
		case f.behind <- struct{}{}:
		default:
		}
	}
}

// run follows the resource from the feed's position until ctx ends or the position is gone.
func (f *feed) run(ctx context.Context) {
	defer metrics.SharedWatches.Dec()
	defer f.fs.end(f)
	log := logf.FromContext(ctx).WithName("mirror-feed").WithValues("resource", f.gvr.GroupResource().String())
	backoff := newBackoff()
	var lastRewind time.Time
	for ctx.Err() == nil {
		f.mu.Lock()
		pos := f.pos
		f.mu.Unlock()
		progressed, rewound, err := f.follow(ctx, pos, &lastRewind)
		switch {
		case ctx.Err() != nil:
			return
		case isGone(err) && f.refuseRewind(err):
			log.Info("a stream's position is older than the API server keeps; it replays", "resourceVersion", pos)
			continue
		case isGone(err), apierrors.IsForbidden(err):
			// Subscribers reconnect from where each stands; a new shared watch starts from now
			// (or, where the manager may not watch all namespaces, each watches its own).
			log.Info("shared watch ended; subscribers reconnect", "resourceVersion", pos, "reason", err.Error())
			return
		case err != nil:
			d := backoff.Step()
			log.Error(err, "shared watch failed; reconnecting", "in", d)
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		case progressed:
			backoff = newBackoff()
		case !rewound:
			// Closed at once without an event: do not ask again in a tight loop.
			select {
			case <-ctx.Done():
			case <-time.After(backoff.Duration):
			}
		}
	}
}

// newBackoff is the wait before a failed shared watch reconnects: 500 ms doubling to 30 s.
func newBackoff() wait.Backoff {
	return wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Cap: 30 * time.Second, Steps: 1 << 30}
}

// refuseRewind ends the subscribers a rewind was for with 410 Gone when the API server refused
// the earlier position (err is Gone), and restores the position the feed had; it reports
// whether there was such a rewind.
func (f *feed) refuseRewind(err error) bool {
	if !isGone(err) {
		return false
	}
	f.mu.Lock()
	subs, from := f.rewound, f.rewoundFrom
	f.rewound, f.rewoundFrom = nil, ""
	if len(subs) == 0 {
		f.mu.Unlock()
		return false
	}
	f.pos = from
	members := 0
	for _, s := range subs {
		if f.remove(s) {
			members++
		}
	}
	f.mu.Unlock()
	metrics.WatchSubscribers.Sub(float64(members))
	for _, s := range subs {
		s.fail(errorEvent(err))
	}
	return true
}

// follow runs one watch from pos and hands its events out until it ends, fails, or subscribers
// behind pos make it start again; it reports whether any event arrived and whether it stopped
// to start again from an earlier position.
func (f *feed) follow(ctx context.Context, pos string, lastRewind *time.Time) (progressed, rewound bool, err error) {
	w, err := f.fs.client.Resource(f.gvr).Watch(ctx, metav1.ListOptions{ResourceVersion: pos, AllowWatchBookmarks: true, TimeoutSeconds: watchTimeout()})
	if err != nil {
		return false, false, err
	}
	defer w.Stop()
	var rewindAt <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return progressed, false, nil
		case <-f.behind:
			// Gathered for a second at most, so joins in a burst share one restart.
			if rewindAt == nil {
				rewindAt = time.After(time.Until(lastRewind.Add(time.Second)))
			}
		case <-rewindAt:
			*lastRewind = time.Now()
			f.rewind()
			return progressed, true, nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return progressed, false, nil
			}
			if ev.Type == watch.Error {
				return progressed, false, apierrors.FromObject(ev.Object)
			}
			m, err := metaOf(ev.Object)
			if err != nil {
				continue
			}
			progressed = true
			f.dispatch(ev, m.GetResourceVersion(), m.GetNamespace())
		}
	}
}

// rewind moves the feed's position back to the earliest waiting subscriber's and lets every
// waiting subscriber follow again; the caller starts the watch again from there.
func (f *feed) rewind() {
	f.mu.Lock()
	defer f.mu.Unlock()
	from := f.pos
	var subs []*sub
	for s := range f.subs {
		if !s.waiting {
			continue
		}
		s.waiting = false
		subs = append(subs, s)
		if before(s.from, f.pos) {
			f.pos = s.from
		}
	}
	if len(subs) == 0 {
		return
	}
	metrics.WatchRewinds.Inc()
	if len(f.rewound) == 0 {
		f.rewoundFrom = from
	}
	f.rewound = append(f.rewound, subs...)
}

// dispatch hands ev to every following subscriber of its namespace (bookmarks to all) and moves
// the feed's position. Every subscriber but the last gets its own copy, made before anyone holds
// the original: streams may change what they are given.
func (f *feed) dispatch(ev watch.Event, rv, ns string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pos = rv
	f.rewound, f.rewoundFrom = nil, "" // the API server accepted the earlier position
	to := make([]*sub, 0, 1)
	take := func(subs map[*sub]struct{}) {
		for s := range subs {
			// Events a subscriber was handed already (the feed started again from an earlier
			// position) are not queued twice.
			if !s.waiting && before(s.handed, rv) {
				to = append(to, s)
				s.handed = rv
			}
		}
	}
	if ev.Type == watch.Bookmark {
		take(f.subs)
	} else {
		take(f.byNS[ns])
		if ns != "" {
			take(f.byNS[""]) // subscribers of every namespace
		}
	}
	for i, s := range to {
		e := ev
		if i < len(to)-1 && ev.Type != watch.Bookmark {
			e.Object = ev.Object.DeepCopyObject()
		}
		s.push(e)
	}
}

// sub is one stream's watch.
type sub struct {
	fs     *Feeds
	feed   *feed
	ns     string
	from   string // the stream asked for every change after this
	out    chan watch.Event
	wake   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	// waiting (guarded by feed.mu) holds the subscriber back until the feed starts again from
	// its position; handed (also) is the position of the last event handed to it.
	waiting bool
	handed  string

	mu       sync.Mutex
	queue    []watch.Event
	overflow bool
	closed   bool
	failure  *watch.Event
}

// ResultChan implements watch.Interface.
func (s *sub) ResultChan() <-chan watch.Event { return s.out }

// Stop implements watch.Interface.
func (s *sub) Stop() { s.cancel() }

// push queues ev for delivery; past the queue limit the subscriber is let go instead.
func (s *sub) push(ev watch.Event) {
	s.mu.Lock()
	switch {
	case s.overflow || s.closed:
	case len(s.queue) >= s.fs.QueueLimit:
		s.overflow, s.queue = true, nil
		metrics.WatchOverflows.Inc()
	default:
		s.queue = append(s.queue, ev)
	}
	s.mu.Unlock()
	s.signal()
}

// close tells s the feed ended: it delivers what it holds and closes its result channel.
func (s *sub) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.signal()
}

// fail ends s with ev (an error event) after what it holds.
func (s *sub) fail(ev watch.Event) {
	s.mu.Lock()
	s.closed, s.failure = true, &ev
	s.mu.Unlock()
	s.signal()
}

func (s *sub) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run delivers what the feed hands over (dispatch hands each change once, after s.from).
func (s *sub) run() {
	defer close(s.out)
	defer s.fs.leave(s)
	defer s.cancel()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.wake:
		}
		s.mu.Lock()
		batch, overflow, closed, failure := s.queue, s.overflow, s.closed, s.failure
		s.queue = nil
		s.mu.Unlock()
		if overflow {
			return // the stream reconnects from what it saw last and reads the rest again
		}
		for _, ev := range batch {
			if !s.send(ev) {
				return
			}
		}
		if failure != nil {
			s.send(*failure)
		}
		if closed {
			return
		}
	}
}

// send delivers ev unless the subscriber is stopped.
func (s *sub) send(ev watch.Event) bool {
	select {
	case s.out <- ev:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// before reports whether resourceVersion a comes before b; positions that do not compare (never
// the case for the API server's) count as before, so nothing is skipped.
func before(a, b string) bool {
	c, err := resourceversion.CompareResourceVersion(a, b)
	return err != nil || c < 0
}

func metaOf(obj runtime.Object) (metav1.Object, error) {
	if obj == nil {
		return nil, errors.New("watch event without an object")
	}
	return apimeta.Accessor(obj)
}

// errorEvent turns a failed watch request into the error event a watch would have sent.
func errorEvent(err error) watch.Event {
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		s := st.Status()
		return watch.Event{Type: watch.Error, Object: &s}
	}
	s := apierrors.NewInternalError(err).Status()
	return watch.Event{Type: watch.Error, Object: &s}
}

// isGone reports whether err says a watch position no longer exists.
func isGone(err error) bool {
	return apierrors.IsGone(err) || apierrors.IsResourceExpired(err)
}
