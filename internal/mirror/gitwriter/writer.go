// Package gitwriter commits mirrored objects into one branch of one git repository and pushes
// them. One Writer serves one (repository, branch); every GitTarget writing there shares it.
//
// Changes are batched in a commit window, built straight into git objects on the last known
// remote tip, and pushed compare-and-swap. When the remote moved, the writer fetches, rebuilds
// the same pending writes on the new tip and pushes again, so both histories survive. Only
// after a push succeeds are the watch cursors of the pushed events handed to the CursorRecorder:
// a crash before that replays the events instead of losing them.
package gitwriter

import (
	"context"
	"sync"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"golang.org/x/sync/semaphore"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/siteops/siteops/internal/egress"
	"github.com/siteops/siteops/internal/mirror/metrics"
)

// Config configures a Writer.
type Config struct {
	// URL of the remote and Branch to write.
	URL, Branch string
	// Auth authenticates to the remote; nil for anonymous.
	Auth transport.AuthMethod
	// Egress decides which URLs and destinations the writer may connect to (every fetch and
	// push, redirects included); nil allows https and ssh to public addresses only.
	Egress *egress.Policy
	// Timeout bounds each fetch and each push; 0 means DefaultTimeout.
	Timeout time.Duration
	// Committer is the identity of every commit, and the author when a change names none.
	Committer Signature
	// Window batches changes into one commit: a batch closes when no change arrived for
	// min(Window, 1s), or Window after its first change, or at MaxBatch changes. 0 makes one
	// commit per change.
	Window time.Duration
	// MaxBatch caps the changes of one batch; default 5000.
	MaxBatch int
	// PushAttempts bounds the rebuild-and-push rounds of one batch when the remote keeps
	// moving; default 5. After that the batch stays pending and is retried later.
	PushAttempts int
	// RetryInterval is the first wait before retrying a failed batch or a failed open of the
	// remote; it doubles up to 1 minute.
	RetryInterval time.Duration
	// ReopenAfter bounds memory: once this many objects were pushed since the last (depth 1)
	// fetch, the in-memory repository is dropped and fetched again; default 100000.
	ReopenAfter int
	// MaxQueuedBytes bounds the file content handed over but not yet taken by the writer (it may
	// be busy pushing): Enqueue blocks past it; default 64 MiB.
	MaxQueuedBytes int64
	// MaxFetchBytes bounds the bytes received from the remote in one fetch or push (HTTP
	// bodies, SSH connection), so a hostile remote cannot stream without end; default
	// DefaultMaxFetchBytes (FlagMaxFetchBytes).
	MaxFetchBytes int64
	// MaxFetchObjectBytes bounds the inflated size of the objects one fetch stores in memory, so
	// a small pack of highly compressed objects cannot fill it; default
	// DefaultMaxFetchObjectBytes (FlagMaxFetchObjectBytes).
	MaxFetchObjectBytes int64
	// MaxSweepEntries bounds the files and folders one sweep looks at in a target's folder (a
	// folder met twice counts twice), so a tree bomb in the repository cannot fill memory; a
	// larger folder is not swept and its target says TargetTooLarge. Default
	// DefaultMaxSweepEntries (FlagMaxSweepEntries).
	MaxSweepEntries int
	// MaxSweepChanges bounds the files one sweep removes, and so the size of its commit; a sweep
	// that would remove more is not made. Default DefaultMaxSweepChanges (FlagMaxSweepChanges).
	MaxSweepChanges int
	// Signer signs every commit; nil makes unsigned commits. A commit that cannot be signed is
	// not made: the batch stays pending.
	Signer Signer
	// Cluster names the cluster in every commit's Cluster trailer; empty leaves the trailer out.
	Cluster string
	// Unattributed authors the changes whose attribution found nothing (Change.Attribution is
	// AttributionAbsent and Change.Author nil); nil leaves them to the committer.
	Unattributed *Signature
	// StopTimeout bounds the last push of the changes the writer holds when Run's context
	// ends; default DefaultStopTimeout.
	StopTimeout time.Duration
	// Cursors records the cursors of pushed ops; nil records nothing.
	Cursors CursorRecorder
	// OnPushed, when set, is called with every change of each successful push.
	OnPushed func([]Pushed)
	// OnCommits, when set, is called with the commits of each successful push, oldest first,
	// before the writer's status says the push happened. It runs on the writer's goroutine and
	// must not block.
	OnCommits func([]PushedCommit)
}

// Status is a snapshot of a Writer's state.
type Status struct {
	// LastPushedCommit and LastPushTime describe the last successful push.
	LastPushedCommit string
	LastPushTime     time.Time
	// Pending counts ops not yet pushed.
	Pending int
	// LastError is the last clone, build or push failure, cleared by a successful push.
	LastError error
	// CursorError is the last cursor store failure, cleared by a successful cursor write.
	CursorError error
	// TooLarge holds, by GitTarget UID, a sweep refused for the size of the target's folder
	// (ErrTargetTooLarge), until a sweep of that folder runs. The other changes were committed.
	TooLarge map[string]error
}

// Writer commits and pushes Ops for one repository and branch. Run it with Run.
type Writer struct {
	cfg    Config
	in     chan *Op // pointers: a buffer of 4096 Ops by value is over 1 MiB per writer
	name   string
	remote *remote

	repo  *git.Repository
	store *objectStore
	tip   plumbing.Hash
	// queuedBytes bounds the content waiting in the input channel (MaxQueuedBytes).
	queuedBytes *semaphore.Weighted
	// built collects the objects the current build stored, for the push.
	built []plumbing.Hash
	// pushedObjects counts objects pushed since the repository was opened.
	pushedObjects int
	// sweeps are the sweeps of the current build and what became of them.
	sweeps []sweepOutcome
	// refusals are the sweeps refused so far, for Status.TooLarge; guarded by mu.
	refusals sweepRefusals
	// commits and commandCommit are the commits of the current build, and the last one that
	// carries a command's message.
	commits       []plumbing.Hash
	commandCommit plumbing.Hash
	// made describes the commits of the current build, for OnCommits.
	made []PushedCommit
	// pending holds the ops taken but not yet pushed. Only Run changes it, always with mu held;
	// Run reads it without mu, PendingChanges with it.
	pending pendingOps

	// commands carries CloseWindow requests to Run; stopped is closed when Run returns.
	commands chan commandRequest
	// finds carries FindRequest requests to Run.
	finds   chan findRequest
	stopped chan struct{}

	mu     sync.Mutex
	status Status
	queued int
	notify []func()
}

// New returns a Writer for cfg; it does nothing until Run.
func New(cfg Config) *Writer {
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 5000
	}
	if cfg.PushAttempts <= 0 {
		cfg.PushAttempts = 5
	}
	if cfg.RetryInterval <= 0 {
		cfg.RetryInterval = time.Second
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = DefaultStopTimeout
	}
	if cfg.ReopenAfter <= 0 {
		cfg.ReopenAfter = 100000
	}
	if cfg.MaxQueuedBytes <= 0 {
		cfg.MaxQueuedBytes = 64 << 20
	}
	if cfg.MaxFetchBytes <= 0 {
		cfg.MaxFetchBytes = DefaultMaxFetchBytes
	}
	if cfg.MaxFetchObjectBytes <= 0 {
		cfg.MaxFetchObjectBytes = DefaultMaxFetchObjectBytes
	}
	if cfg.MaxSweepEntries <= 0 {
		cfg.MaxSweepEntries = DefaultMaxSweepEntries
	}
	if cfg.MaxSweepChanges <= 0 {
		cfg.MaxSweepChanges = DefaultMaxSweepChanges
	}
	return &Writer{cfg: cfg, in: make(chan *Op, 4096), name: egress.Redact(cfg.URL) + "#" + cfg.Branch, remote: newRemote(cfg), commands: make(chan commandRequest), finds: make(chan findRequest), stopped: make(chan struct{}),
		queuedBytes: semaphore.NewWeighted(cfg.MaxQueuedBytes), refusals: sweepRefusals{}}
}

// OnStatusChange registers fn to be called (without locks held) after each push or failure.
func (w *Writer) OnStatusChange(fn func()) {
	w.mu.Lock()
	w.notify = append(w.notify, fn)
	w.mu.Unlock()
}

// Enqueue hands op to the writer, blocking while its queue is full, in ops or in content bytes
// (back-pressure on the watch).
func (w *Writer) Enqueue(ctx context.Context, op Op) error {
	n := w.queuedWeight(op)
	if err := w.queuedBytes.Acquire(ctx, n); err != nil {
		return err
	}
	w.mu.Lock()
	w.queued++
	w.mu.Unlock()
	select {
	case w.in <- &op:
		return nil
	case <-ctx.Done():
		w.mu.Lock()
		w.queued--
		w.mu.Unlock()
		w.queuedBytes.Release(n)
		return ctx.Err()
	}
}

// queuedWeight is what op counts against MaxQueuedBytes: its content, at most the whole bound
// (a larger object waits for an empty queue).
func (w *Writer) queuedWeight(op Op) int64 {
	return min(int64(len(op.Change.Content)), w.cfg.MaxQueuedBytes)
}

// Status returns a snapshot of the writer's state.
func (w *Writer) Status() Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.status
	s.Pending += w.queued
	s.TooLarge = w.refusals.byTarget()
	return s
}

func (w *Writer) setStatus(fn func(*Status)) {
	w.mu.Lock()
	fn(&w.status)
	notify := append([]func(){}, w.notify...)
	w.mu.Unlock()
	for _, n := range notify {
		n()
	}
}

// Run clones the remote and processes ops until ctx ends; pending ops get a last push attempt,
// bounded by StopTimeout. While the remote cannot be opened, commands are answered with
// ErrRemoteUnavailable.
func (w *Writer) Run(ctx context.Context) error {
	defer close(w.stopped)
	defer w.remote.closeIdle()
	log := logf.FromContext(ctx).WithValues("remote", w.remote.shown, "branch", w.cfg.Branch)
	if ctx.Err() != nil || !w.openRemote(ctx) {
		return ctx.Err()
	}
	defer metrics.PendingWrites.DeleteLabelValues(w.name)

	pending := &w.pending
	var first, last time.Time
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	retryDelay := w.cfg.RetryInterval
	retrying := false
	quiet := min(w.cfg.Window, time.Second)

	take := func(op Op) {
		w.queuedBytes.Release(w.queuedWeight(op))
		if op.Change.Author == nil && op.Change.Attribution == AttributionAbsent && w.cfg.Unattributed != nil {
			// Named as unknown rather than passed off as the committer's own change.
			op.Change.Author = w.cfg.Unattributed
		}
		now := time.Now()
		if pending.len() == 0 {
			// The window runs from the event's arrival, not from when the writer got to it (it may
			// have been busy pushing), so a change waits at most Window before its commit.
			first = now
			if r := op.Change.Received; !r.IsZero() && r.Before(now) {
				first = r
			}
		}
		last = now
		w.mu.Lock()
		pending.add(op)
		w.queued--
		w.status.Pending = pending.len()
		w.mu.Unlock()
	}
	flushWith := func(fctx context.Context, cmd *Command) (CommandResult, error) {
		w.mu.Lock()
		ops := pending.list()
		w.mu.Unlock()
		res, err := w.flush(fctx, ops, cmd)
		if err != nil {
			// Until a push succeeds, a file's newer change replaces its pending one, so memory
			// follows the number of files, not of changes.
			w.mu.Lock()
			pending.startCoalescing()
			w.status.Pending = pending.len()
			w.mu.Unlock()
			log.Error(err, "push failed; changes stay pending", "pending", pending.len(), "retryIn", retryDelay)
			w.setStatus(func(s *Status) { s.LastError = err })
			retrying = true
			timer.Reset(retryDelay)
			retryDelay = min(2*retryDelay, time.Minute)
			return res, err
		}
		retrying = false
		retryDelay = w.cfg.RetryInterval
		w.mu.Lock()
		pending.reset()
		w.status.Pending = 0
		w.mu.Unlock()
		return res, nil
	}
	flush := func(fctx context.Context) {
		if pending.len() == 0 {
			return
		}
		_, _ = flushWith(fctx, nil)
	}
	for {
		metrics.PendingWrites.WithLabelValues(w.name).Set(float64(w.Status().Pending))
		// While pushes fail, stop taking ops past a bound: the watches then block, and their
		// unpushed events stay uncommitted to their cursors instead of piling up in memory.
		in := w.in
		if retrying && pending.len() >= 4*w.cfg.MaxBatch {
			in = nil
		}
		select {
		case <-ctx.Done():
			// Drain what the watches already handed over, then try once more to push it.
			for {
				select {
				case op := <-w.in:
					take(*op)
					continue
				default:
				}
				break
			}
			// The last push outlives ctx, bounded by StopTimeout: a remote that never answers
			// delays the writer's stop (and a leader's handover) by no more than that.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.StopTimeout)
			flush(fctx)
			cancel()
			return nil
		case op := <-in:
			take(*op)
			// Take whatever else is already queued before deciding, so bursts batch well.
		drain:
			for pending.len() < w.cfg.MaxBatch {
				select {
				case op := <-w.in:
					take(*op)
				default:
					break drain
				}
			}
			if retrying {
				continue
			}
			if w.cfg.Window == 0 || pending.len() >= w.cfg.MaxBatch {
				timer.Stop()
				flush(ctx)
				continue
			}
			deadline := last.Add(quiet)
			if capAt := first.Add(w.cfg.Window); capAt.Before(deadline) {
				deadline = capAt
			}
			timer.Reset(time.Until(deadline))
		case <-timer.C:
			flush(ctx)
		case req := <-w.commands:
			// Everything handed over before the request belongs to the window it closes.
		drainAll:
			for {
				select {
				case op := <-w.in:
					take(*op)
				default:
					break drainAll
				}
			}
			timer.Stop()
			res, err := flushWith(ctx, &req.cmd)
			req.done <- commandOutcome{res, err}
		case req := <-w.finds:
			res, err := w.findRequest(ctx, req.request)
			req.done <- commandOutcome{res, err}
		}
	}
}
