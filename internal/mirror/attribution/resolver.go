// Package attribution names the author of each mirrored change by joining watch events with the
// audit facts the audit receiver stored, and derives git identities from them.
//
// Audit events reach the receiver after the watch event they belong to (the API server batches
// its webhook), so a watch event may have to wait up to a grace period for its fact. The wait is
// per event and concurrent: an event waiting for its fact never holds up events of other objects.
// What is kept in order is what git and the resume cursors need:
//
//   - events of one object (one file path) reach the writer in watch order;
//   - a sweep is a barrier: it waits for everything before it, and everything after waits for it;
//   - a watch cursor is only handed to the writer with the oldest outstanding event of its stream,
//     carrying the newest resourceVersion whose events have all been handed over, so a crash can
//     never record a cursor past an event that was still waiting.
package attribution

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/siteops/siteops/internal/mirror/gitwriter"
	"github.com/siteops/siteops/internal/mirror/store"
)

// DefaultGrace is how long a watch event waits for its audit fact (--author-attribution-grace).
const DefaultGrace = 3 * time.Second

// Lookup reads attribution facts (the store's AttributionIndex).
type Lookup interface {
	Find(ctx context.Context, q store.Query) (store.AuthorResolution, error)
}

// sticker records a removal's credit for the object's later removal events (the store's
// AttributionIndex); a Lookup without it simply does not.
type sticker interface {
	Stick(ctx context.Context, q store.Query, f store.AuthorFact) error
}

// Announcements delivers the announcements of stored facts (the store's AttributionIndex).
type Announcements interface {
	Subscribe(ctx context.Context, route string, h store.AnnouncementHandler) error
}

// Sink receives ops in order (the git writer).
type Sink interface {
	Enqueue(ctx context.Context, op gitwriter.Op) error
}

// Config configures a Resolver.
type Config struct {
	// Index holds the facts; nil disables attribution (every change by the committer, no wait).
	Index Lookup
	// Route is the audit route (the API server's audit webhook path segment) facts are stored under.
	Route string
	// Grace bounds the wait for a fact; 0 means DefaultGrace.
	Grace time.Duration
	// Announcements, when set, wakes a waiting event when its fact is stored (Start subscribes).
	// While subscribed, a waiting event looks up its facts when it arrives, when an
	// announcement names them, and when its grace period ends — never on a timer.
	Announcements Announcements
	// MaxPoll caps the interval between two lookups of one waiting event while no announcement
	// subscription is established (none configured, or Redis refusing it); 0 means 200ms. Polls
	// start at 20ms and double; Notify wakes every waiting event at once.
	MaxPoll time.Duration
	// Identity turns facts into git signatures.
	Identity Identity
	// OnResolved, when set, is called for every resolution (tests, benchmarks).
	OnResolved func(Resolved)
	// MaxWaiting caps the events waiting at once; 0 means DefaultMaxWaiting.
	MaxWaiting int
	// Clock times each event's wait for its fact (the grace period, the polls and Waited); nil
	// means the real clock. Tests pass a fake one to end a grace period when they choose.
	Clock clock.Clock
}

// DefaultMaxWaiting is the default cap on waiting events (--author-attribution-max-waiting).
const DefaultMaxWaiting = 10000

// Resolved describes one finished resolution.
type Resolved struct {
	// GVR, UID and RV identify the watch event.
	GVR schema.GroupVersionResource
	UID types.UID
	RV  string
	// Result classifies the match; Fact is the matched fact (zero when absent).
	Result store.AttributionResult
	Fact   store.AuthorFact
	// Author is the commit author; nil means the committer.
	Author *gitwriter.Signature
	// Waited is the time from submission to resolution.
	Waited time.Duration
}

// Resolver resolves commit authors of watch events without blocking unrelated events.
type Resolver struct {
	cfg Config

	wakeMu sync.Mutex
	wake   chan struct{}

	// waiters are the waiting events by the wake tokens they wait for; subscribed is set once
	// announcements arrive, and turns polling off.
	waitersMu  sync.Mutex
	waiters    map[string]map[*waiter]struct{}
	subscribed atomic.Bool

	// waiting counts events submitted with EnqueueEvent whose ops have not reached the writer:
	// still waiting for their facts, or resolved but held up by the writer. It bounds memory
	// when facts stop arriving or the writer stops taking ops.
	waiting atomic.Int64

	// streams are the ordering domains of each GitTarget's watches, for Settle.
	streamsMu sync.Mutex
	streams   map[types.NamespacedName]map[streamID]*Stream
}

// New returns a Resolver for cfg.
func New(cfg Config) *Resolver {
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	if cfg.MaxPoll <= 0 {
		cfg.MaxPoll = 200 * time.Millisecond
	}
	if cfg.MaxWaiting <= 0 {
		cfg.MaxWaiting = DefaultMaxWaiting
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Resolver{cfg: cfg, wake: make(chan struct{}), waiters: map[string]map[*waiter]struct{}{}}
}

// Waiting returns the number of events waiting for their facts or to be handed over.
func (r *Resolver) Waiting() int { return int(r.waiting.Load()) }

// admit takes a place among the waiting events, or reports that all MaxWaiting are taken.
func (r *Resolver) admit() bool {
	for {
		n := r.waiting.Load()
		if n >= int64(r.cfg.MaxWaiting) {
			return false
		}
		if r.waiting.CompareAndSwap(n, n+1) {
			Waiting.Inc()
			return true
		}
	}
}

// release gives a waiting event's place back once its op reached the writer (or was dropped).
func (r *Resolver) release() {
	r.waiting.Add(-1)
	Waiting.Dec()
}

// overflow resolves an event that found every waiting place taken: as the committer's, at once.
func (r *Resolver) overflow(gvr schema.GroupVersionResource, uid types.UID, rv string) {
	Overflows.Inc()
	Resolutions.WithLabelValues(string(store.AttributionAbsent)).Inc()
	if r.cfg.OnResolved != nil {
		r.cfg.OnResolved(Resolved{GVR: gvr, UID: uid, RV: rv, Result: store.AttributionAbsent})
	}
}

// Enabled reports whether events are attributed at all.
func (r *Resolver) Enabled() bool { return r != nil && r.cfg.Index != nil }

// Notify wakes every waiting event to look again now.
func (r *Resolver) Notify() {
	r.wakeMu.Lock()
	close(r.wake)
	r.wake = make(chan struct{})
	r.wakeMu.Unlock()
}

func (r *Resolver) wakeup() <-chan struct{} {
	r.wakeMu.Lock()
	defer r.wakeMu.Unlock()
	return r.wake
}

// Resolve waits (up to the grace period, or until ctx ends) for the fact of one watch event and
// returns its resolution. It blocks only its caller.
func (r *Resolver) Resolve(ctx context.Context, gvr schema.GroupVersionResource, uid types.UID, rv string, exactCapable bool) Resolved {
	return r.resolve(ctx, store.Query{GVR: gvr, UID: uid, RV: rv, Removal: !exactCapable})
}

func (r *Resolver) resolve(ctx context.Context, q store.Query) Resolved {
	start := r.cfg.Clock.Now()
	q.Route = r.cfg.Route
	res := store.AuthorResolution{Result: store.AttributionAbsent}
	if r.Enabled() {
		res = r.wait(ctx, q)
	}
	if res.Result == store.AttributionExactDeleteCollectionScope {
		// The object may still be terminating: its DELETED event, after a controller removed
		// the finalizers, keeps this credit.
		if st, ok := r.cfg.Index.(sticker); ok {
			_ = st.Stick(ctx, q, res.Fact)
		}
	}
	out := Resolved{GVR: q.GVR, UID: q.UID, RV: q.RV, Result: res.Result, Fact: res.Fact, Waited: r.cfg.Clock.Since(start)}
	if res.Result != store.AttributionAbsent {
		sig := r.cfg.Identity.Signature(res.Fact)
		out.Author = &sig
	}
	if r.Enabled() {
		Resolutions.WithLabelValues(string(out.Result)).Inc()
		WaitSeconds.Observe(out.Waited.Seconds())
	}
	if r.cfg.OnResolved != nil {
		r.cfg.OnResolved(out)
	}
	return out
}

// wait looks up q's facts when it starts, whenever an announcement names them (or, without a
// subscription, on a backing-off poll) and once more when the grace period ends. A final match
// returns at once; a provisional one (see store.AuthorResolution) only when the grace ends.
func (r *Resolver) wait(ctx context.Context, q store.Query) store.AuthorResolution {
	absent := store.AuthorResolution{Result: store.AttributionAbsent}
	// Registered before the first look, so an announcement made during it still wakes us.
	w := r.register(store.WakeTokens(q))
	defer r.unregister(w)
	deadline := r.cfg.Clock.NewTimer(r.cfg.Grace)
	defer deadline.Stop()
	poll := 20 * time.Millisecond
	for {
		// Take the wake channel before looking, so a Notify during the lookup still wakes us.
		all := r.wakeup()
		res, err := r.cfg.Index.Find(ctx, q)
		if err == nil && res.Result != store.AttributionAbsent && !res.Provisional {
			return res
		}
		var tick <-chan time.Time
		var t clock.Timer
		if !r.subscribed.Load() {
			t = r.cfg.Clock.NewTimer(poll)
			tick = t.C()
		}
		select {
		case <-ctx.Done():
			stopTimer(t)
			return absent
		case <-deadline.C():
			stopTimer(t)
			// The safety net: one last look, whatever announcements were missed.
			if res, err := r.cfg.Index.Find(ctx, q); err == nil {
				return res
			}
			return absent
		case <-all:
		case <-w.wake:
		case <-tick:
			poll = min(2*poll, r.cfg.MaxPoll)
		}
		stopTimer(t)
	}
}

func stopTimer(t clock.Timer) {
	if t != nil {
		t.Stop()
	}
}

// Event identifies the watch event an op comes from.
type Event struct {
	// UID and RV are the object's UID and the event's resourceVersion.
	UID types.UID
	RV  string
	// ExactCapable is true for ADDED and MODIFIED events, false for removals (DELETED, or an
	// object with a deletionTimestamp), whose RV never matches the deleting request's.
	ExactCapable bool
	// Namespace is the object's namespace ("" when cluster-scoped); with the time the event is
	// submitted it places a removal in a collection delete's scope and time window.
	Namespace string
}

// Stream is the ordering domain of one watch stream: it hands the stream's ops to the writer in
// an order that keeps each object's history and the stream's cursor safe, while events wait for
// their authors concurrently. It implements Sink for ops that need no author.
type Stream struct {
	r    *Resolver
	next Sink
	gvr  schema.GroupVersionResource

	mu      sync.Mutex
	queue   []*entry // submitted, not yet handed over or still ahead of the cursor
	deliver sync.Mutex
	// ignoreUsers are users whose changes are not committed (the rules' ignore.users).
	ignoreUsers []string
}

// ignored reports whether res names, exactly, a user whose changes are not committed. A weak
// match (the object's previous writer) never hides a change.
func (s *Stream) ignored(res Resolved) bool {
	exact := res.Result == store.AttributionExactUser || res.Result == store.AttributionExactServiceAccount
	return exact && slices.Contains(s.ignoreUsers, res.Fact.Author)
}

type entry struct {
	ctx       context.Context
	op        gitwriter.Op
	cursor    gitwriter.Cursor // the op's own cursor; op.Cursor is what is handed over
	resolved  bool
	delivered bool
	barrier   bool
	object    string
	// counted holds one of the resolver's waiting places until the op reaches the writer.
	counted bool
}

// NewStream returns the ordering domain of one watch stream of gvr, handing ops to next.
func (r *Resolver) NewStream(next Sink, gvr schema.GroupVersionResource) *Stream {
	return &Stream{r: r, next: next, gvr: gvr}
}

// Enqueue hands over an op that needs no author (a mark, a sweep, a replayed object) in order
// with the stream's waiting events. It returns once the op is handed over or queued behind a
// waiting event; errors of a queued hand-over end in the writer's own error handling.
func (s *Stream) Enqueue(ctx context.Context, op gitwriter.Op) error {
	s.add(ctx, op, true)
	return s.flush()
}

// EnqueueEvent hands over an op of a live watch event after resolving its author, concurrently:
// the call returns at once, and the op reaches the writer when its fact is found or the grace
// period ends, in order with the other ops of its object. When MaxWaiting events already wait,
// the op goes through at once as the committer's (result absent, counted in Overflows), with
// Enqueue's back-pressure.
func (s *Stream) EnqueueEvent(ctx context.Context, op gitwriter.Op, ev Event) error {
	if !s.r.Enabled() || op.Kind == gitwriter.OpMark || op.Kind == gitwriter.OpSweep {
		return s.Enqueue(ctx, op)
	}
	if !s.r.admit() {
		s.r.overflow(s.gvr, ev.UID, ev.RV)
		op.Change.Author = nil
		op.Change.Attribution, op.Change.AuditID = string(store.AttributionAbsent), ""
		return s.Enqueue(ctx, op)
	}
	e := s.add(ctx, op, false)
	e.counted = true
	q := store.Query{GVR: s.gvr, UID: ev.UID, RV: ev.RV, Removal: !ev.ExactCapable, Namespace: ev.Namespace, At: time.Now()}
	go func() {
		res := s.r.resolve(ctx, q)
		s.mu.Lock()
		e.op.Change.Author = res.Author
		// The commit's provenance trailers (Audit-ID, Attribution).
		e.op.Change.Attribution, e.op.Change.AuditID = string(res.Result), res.Fact.AuditID
		if s.ignored(res) {
			// Not committed: only the stream's cursor moves on.
			e.op = gitwriter.Op{Kind: gitwriter.OpMark, Target: e.op.Target, Cursor: e.op.Cursor}
		}
		e.resolved = true
		s.mu.Unlock()
		_ = s.flush()
	}()
	return nil
}

// Pending returns the number of ops not yet handed over.
func (s *Stream) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.queue {
		if !e.delivered {
			n++
		}
	}
	return n
}

func (s *Stream) add(ctx context.Context, op gitwriter.Op, resolved bool) *entry {
	e := &entry{ctx: ctx, op: op, cursor: op.Cursor, resolved: resolved, barrier: op.Kind == gitwriter.OpSweep}
	if op.Kind == gitwriter.OpUpsert || op.Kind == gitwriter.OpDelete {
		e.object = op.Change.Path
	}
	s.mu.Lock()
	s.queue = append(s.queue, e)
	s.mu.Unlock()
	return e
}

// flush hands over every op that may go now, in queue order. Hand-overs are serialized per
// stream so the writer sees them in the order decided here.
func (s *Stream) flush() error {
	s.deliver.Lock()
	defer s.deliver.Unlock()
	ready := s.takeReady()
	var firstErr error
	for _, e := range ready {
		if e.ctx.Err() != nil {
			// The watch stream stopped (restart, target removed): drop its op. Its cursor was
			// never recorded, so the next stream sees the change again, and a late hand-over
			// could overwrite what that stream already wrote.
			if e.counted {
				s.r.release()
			}
			continue
		}
		if err := s.next.Enqueue(e.ctx, e.op); err != nil && firstErr == nil {
			firstErr = err
		}
		if e.counted {
			s.r.release()
		}
	}
	return firstErr
}

// takeReady marks and returns the ops that may be handed over now, with cursors adjusted.
func (s *Stream) takeReady() []*entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ready []*entry
	blocked := map[string]bool{} // objects with an earlier op still waiting
	barrierAhead := false
	for i, e := range s.queue {
		if e.delivered {
			continue
		}
		ok := e.resolved && !barrierAhead && (e.object == "" || !blocked[e.object])
		if e.barrier && i > 0 && s.undeliveredBefore(i) {
			ok = false
		}
		if !ok {
			if e.object != "" {
				blocked[e.object] = true
			}
			if e.barrier {
				barrierAhead = true
			}
			continue
		}
		e.delivered = true
		ready = append(ready, e)
	}
	// Cursors: only the oldest outstanding position may move the stream's cursor, to the newest
	// RV whose ops have all been handed over (now or before). Ops handed over ahead of a waiting
	// one carry no cursor.
	head := 0
	for head < len(s.queue) && s.queue[head].delivered {
		head++
	}
	var cursor gitwriter.Cursor
	var carrier *entry
	for _, e := range s.queue[:head] {
		if e.cursor.RV != "" {
			cursor = e.cursor
		}
	}
	for _, e := range ready {
		e.op.Cursor = gitwriter.Cursor{}
		if containsEntry(s.queue[:head], e) {
			// ready is in queue order: the last one inside the handed-over prefix goes after
			// every op of that prefix, so its cursor is recorded only once all are pushed.
			carrier = e
		}
	}
	if carrier != nil && cursor.RV != "" {
		carrier.op.Cursor = cursor
	}
	s.queue = s.queue[head:]
	return ready
}

func (s *Stream) undeliveredBefore(i int) bool {
	for _, e := range s.queue[:i] {
		if !e.delivered {
			return true
		}
	}
	return false
}

func containsEntry(es []*entry, x *entry) bool {
	for _, e := range es {
		if e == x {
			return true
		}
	}
	return false
}
