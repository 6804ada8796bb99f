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
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"golang.org/x/sync/semaphore"
	"k8s.io/apimachinery/pkg/runtime/schema"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/siteops/siteops/internal/egress"
	"github.com/siteops/siteops/internal/mirror/metrics"
)

// OpKind says what an Op does.
type OpKind int

// Op kinds.
const (
	// OpUpsert writes Change.Content to Change.Path.
	OpUpsert OpKind = iota
	// OpDelete removes Change.Path.
	OpDelete
	// OpMark carries only a cursor: an event that changes no file (skipped, bookmark).
	OpMark
	// OpSweep removes every file under SweepDir whose path is not in Keep (mark-and-sweep after a
	// full replay).
	OpSweep
)

// Signature is a git identity.
type Signature struct {
	Name  string
	Email string
}

// Cursor names the watch position an Op was produced at.
type Cursor struct {
	// TargetUID is the GitTarget's UID.
	TargetUID string
	// GVR is the watched resource.
	GVR schema.GroupVersionResource
	// Namespace is the watched namespace; empty for the cluster scope.
	Namespace string
	// RV is the resourceVersion of the event; empty means the op moves no cursor.
	RV string
}

// Change is one file write or removal.
type Change struct {
	// Path of the file in the repository.
	Path string
	// Content of the file; unused for deletes.
	Content []byte
	// Ref names the object in commit messages: <apiVersion>/<resource>/<namespace>/<name>.
	Ref string
	// Author made the change; nil means the committer. Per-event author resolution sets it.
	Author *Signature
	// Received is when the watch event arrived, for the event→pushed latency.
	Received time.Time
}

// Op is one unit of work for the writer, applied in the order received.
type Op struct {
	Kind OpKind
	// Target is the UID of the GitTarget the op belongs to; a Command claims only its own
	// target's ops. Unlike Cursor it is always set (an op may be handed over without a cursor).
	Target string
	Change Change
	// SweepDir, Keep and SweepRefPrefix describe an OpSweep: Keep holds full file paths; a
	// removed file's commit line is SweepRefPrefix + its name.
	SweepDir       string
	Keep           map[string]struct{}
	SweepRefPrefix string
	// Cursor is recorded once this op is pushed.
	Cursor Cursor
}

// CursorRecorder stores watch cursors durably (the Redis store).
type CursorRecorder interface {
	RecordWatchCursor(ctx context.Context, gitTargetUID string, gvr schema.GroupVersionResource, namespace, rv string) error
}

// Pushed describes one change that reached the remote, for observers.
type Pushed struct {
	Path     string
	Cursor   Cursor
	Received time.Time
	PushedAt time.Time
	Commit   plumbing.Hash
}

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
	// RetryInterval is the first wait before retrying a failed batch; it doubles up to 1 minute.
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
	// Cursors records the cursors of pushed ops; nil records nothing.
	Cursors CursorRecorder
	// OnPushed, when set, is called with every change of each successful push.
	OnPushed func([]Pushed)
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
}

// Writer commits and pushes Ops for one repository and branch. Run it with Run.
type Writer struct {
	cfg    Config
	in     chan Op
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
	// commits and commandCommit are the commits of the current build, and the last one that
	// carries a command's message.
	commits       []plumbing.Hash
	commandCommit plumbing.Hash

	// commands carries CloseWindow requests to Run; stopped is closed when Run returns.
	commands chan commandRequest
	stopped  chan struct{}

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
	return &Writer{cfg: cfg, in: make(chan Op, 4096), name: egress.Redact(cfg.URL) + "#" + cfg.Branch, remote: newRemote(cfg), commands: make(chan commandRequest), stopped: make(chan struct{}),
		queuedBytes: semaphore.NewWeighted(cfg.MaxQueuedBytes)}
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
	case w.in <- op:
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

// Run clones the remote and processes ops until ctx ends; pending ops get a last push attempt.
func (w *Writer) Run(ctx context.Context) error {
	defer close(w.stopped)
	log := logf.FromContext(ctx).WithValues("remote", w.remote.shown, "branch", w.cfg.Branch)
	backoff := w.cfg.RetryInterval
	for {
		err := w.open(ctx)
		if err == nil {
			break
		}
		log.Error(err, "open the git remote; retrying", "in", backoff)
		w.setStatus(func(s *Status) { s.LastError = err })
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Minute)
	}
	defer metrics.PendingWrites.DeleteLabelValues(w.name)

	var pending pendingOps
	var first, last time.Time
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	retryDelay := w.cfg.RetryInterval
	retrying := false
	quiet := min(w.cfg.Window, time.Second)

	take := func(op Op) {
		w.queuedBytes.Release(w.queuedWeight(op))
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
		pending.add(op)
		w.mu.Lock()
		w.queued--
		w.status.Pending = pending.len()
		w.mu.Unlock()
	}
	flushWith := func(fctx context.Context, cmd *Command) (CommandResult, error) {
		res, err := w.flush(fctx, pending.list(), cmd)
		if err != nil {
			// Until a push succeeds, a file's newer change replaces its pending one, so memory
			// follows the number of files, not of changes.
			pending.startCoalescing()
			w.mu.Lock()
			w.status.Pending = pending.len()
			w.mu.Unlock()
			log.Error(err, "push failed; changes stay pending", "pending", pending.len(), "retryIn", retryDelay)
			w.setStatus(func(s *Status) { s.LastError = err })
			retrying = true
			timer.Reset(retryDelay)
			retryDelay = min(2*retryDelay, time.Minute)
			return res, err
		}
		pending.reset()
		retrying = false
		retryDelay = w.cfg.RetryInterval
		w.mu.Lock()
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
					take(op)
					continue
				default:
				}
				break
			}
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			flush(fctx)
			cancel()
			return nil
		case op := <-in:
			take(op)
			// Take whatever else is already queued before deciding, so bursts batch well.
		drain:
			for pending.len() < w.cfg.MaxBatch {
				select {
				case op := <-w.in:
					take(op)
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
					take(op)
				default:
					break drainAll
				}
			}
			timer.Stop()
			res, err := flushWith(ctx, &req.cmd)
			req.done <- commandOutcome{res, err}
		}
	}
}

// open clones the branch into memory, or starts an empty history when the branch does not exist.
func (w *Writer) open(ctx context.Context) error {
	st := newObjectStore(w.cfg.MaxFetchBytes, w.cfg.MaxFetchObjectBytes)
	repo, err := git.Init(st, nil)
	if err != nil {
		return fmt.Errorf("init in-memory repository: %w", err)
	}
	w.repo, w.store = repo, st
	if _, err := w.fetch(ctx); err != nil {
		return err
	}
	return nil
}

// reopen replaces the in-memory repository by a fresh depth-1 fetch, releasing every object
// the writer accumulated. On failure the current repository is kept.
func (w *Writer) reopen(ctx context.Context) {
	repo, store, tip := w.repo, w.store, w.tip
	if err := w.open(ctx); err != nil {
		logf.FromContext(ctx).Error(err, "refetch the repository to release memory; keeping the current one")
		w.repo, w.store, w.tip = repo, store, tip
		return
	}
	w.pushedObjects = 0
}

func (w *Writer) remoteRef() plumbing.ReferenceName {
	return plumbing.NewRemoteReferenceName("origin", w.cfg.Branch)
}

// fetch updates the remote-tracking branch and returns whether the remote tip differs from
// the writer's tip. A missing branch leaves the tip empty. Only the tip commit is fetched
// (depth 1): the writer only builds on the tip, so history is never needed in memory.
func (w *Writer) fetch(ctx context.Context) (bool, error) {
	ctx, ex, cancel := w.remote.begin(ctx)
	defer cancel()
	what := fmt.Sprintf("fetch %s from %s", w.cfg.Branch, w.remote.shown)
	sess, release, err := w.remote.uploadPack(ctx, ex)
	if err != nil {
		return false, w.remote.describe(ctx, ex, what, err)
	}
	defer release()
	ar, err := sess.AdvertisedReferencesContext(ctx)
	missing := errors.Is(err, transport.ErrEmptyRemoteRepository)
	if err != nil && !missing {
		return false, w.remote.describe(ctx, ex, what, err)
	}
	var tip plumbing.Hash
	if !missing {
		if refs, err := ar.AllReferences(); err == nil {
			if ref, err := refs.Reference(plumbing.NewBranchReferenceName(w.cfg.Branch)); err == nil {
				tip = ref.Hash()
			}
		}
	}
	if tip.IsZero() {
		moved := !w.tip.IsZero()
		w.tip = plumbing.ZeroHash
		return moved, nil
	}
	if _, err := w.repo.Storer.EncodedObject(plumbing.CommitObject, tip); err != nil {
		req := packp.NewUploadPackRequestFromCapabilities(ar.Capabilities)
		req.Wants = []plumbing.Hash{tip}
		req.Depth = packp.DepthCommits(1)
		if err := req.Capabilities.Set(capability.Shallow); err != nil {
			return false, fmt.Errorf("%s: request a shallow fetch: %w", what, err)
		}
		// No side bands: the remote's progress and messages are never read.
		req.Capabilities.Delete(capability.Sideband64k)
		req.Capabilities.Delete(capability.Sideband)
		if ar.Capabilities.Supports(capability.NoProgress) {
			_ = req.Capabilities.Set(capability.NoProgress)
		}
		if _, err := w.repo.Storer.EncodedObject(plumbing.CommitObject, w.tip); !w.tip.IsZero() && err == nil {
			// The remote then sends only what changed since the writer's tip; the shallow lines
			// tell it where the writer's history stops, so it assumes nothing older is here.
			req.Haves = []plumbing.Hash{w.tip}
			if req.Shallows, err = w.repo.Storer.Shallow(); err != nil {
				return false, fmt.Errorf("read the shallow commits: %w", err)
			}
		}
		resp, err := sess.UploadPack(ctx, req)
		if err == nil {
			err = packfile.UpdateObjectStorage(w.repo.Storer, resp)
			_ = resp.Close()
		}
		if err != nil {
			return false, w.remote.describe(ctx, ex, what, err)
		}
		if err := w.addShallows(resp.Shallows); err != nil {
			return false, err
		}
		if _, err := w.repo.Storer.EncodedObject(plumbing.CommitObject, tip); err != nil {
			return false, &RemoteError{msg: fmt.Sprintf("%s: the remote did not send commit %s; retrying", what, tip)}
		}
	}
	if err := w.repo.Storer.SetReference(plumbing.NewHashReference(w.remoteRef(), tip)); err != nil {
		return false, fmt.Errorf("record fetched branch %s: %w", w.cfg.Branch, err)
	}
	moved := tip != w.tip
	w.tip = tip
	return moved, nil
}

// addShallows records commits fetched without their parents.
func (w *Writer) addShallows(hs []plumbing.Hash) error {
	if len(hs) == 0 {
		return nil
	}
	known, err := w.repo.Storer.Shallow()
	if err != nil {
		return fmt.Errorf("read the shallow commits: %w", err)
	}
	for _, h := range hs {
		if !slices.Contains(known, h) {
			known = append(known, h)
		}
	}
	if err := w.repo.Storer.SetShallow(known); err != nil {
		return fmt.Errorf("record the shallow commits: %w", err)
	}
	return nil
}

// flush commits ops on the current tip and pushes, rebuilding on a moved remote. cmd, when set,
// commits its target's changes with its message and author (see CloseWindow).
func (w *Writer) flush(ctx context.Context, ops []Op, cmd *Command) (CommandResult, error) {
	log := logf.FromContext(ctx)
	var lastErr error
	res := CommandResult{Author: w.cfg.Committer}
	// The blobs built here are pushed or refused by the time flush returns; either way they are
	// not needed any more (a retry builds them again).
	defer func() { w.store.releaseBlobs() }()
	// Cursors follow the order the ops were received in, even when a command reorders commits.
	received := ops
	if cmd != nil {
		ops = cmd.order(ops, w.cfg.Committer)
		if cmd.Author != nil {
			res.Author = *cmd.Author
		}
	}
	for attempt := 0; attempt < w.cfg.PushAttempts; attempt++ {
		base := w.tip
		newTip, applied, objects, err := w.build(base, ops, cmd)
		if err != nil {
			return res, err
		}
		if newTip == base {
			w.recordCursors(ctx, received)
			return res, nil
		}
		err = w.push(ctx, base, newTip, objects)
		if err == nil {
			now := time.Now()
			w.tip = newTip
			metrics.Pushes.WithLabelValues("success").Inc()
			w.setStatus(func(s *Status) {
				s.LastPushedCommit, s.LastPushTime, s.LastError = newTip.String(), now, nil
			})
			pushed := make([]Pushed, 0, len(applied))
			for _, a := range applied {
				for _, op := range a.ops {
					if !op.Change.Received.IsZero() {
						metrics.PushLatency.Observe(now.Sub(op.Change.Received).Seconds())
					}
					pushed = append(pushed, Pushed{Path: a.path, Cursor: op.Cursor, Received: op.Change.Received, PushedAt: now, Commit: newTip})
				}
			}
			w.recordCursors(ctx, received)
			if w.cfg.OnPushed != nil {
				w.cfg.OnPushed(pushed)
			}
			w.pushedObjects += len(objects)
			for _, h := range w.commits {
				res.Commits = append(res.Commits, h.String())
			}
			if !w.commandCommit.IsZero() {
				res.Commit = w.commandCommit.String()
			}
			if w.pushedObjects >= w.cfg.ReopenAfter {
				w.reopen(ctx)
			}
			return res, nil
		}
		lastErr = err
		moved, ferr := w.fetch(ctx)
		if ferr != nil {
			metrics.Pushes.WithLabelValues("error").Inc()
			return res, fmt.Errorf("%w; then %w", err, ferr)
		}
		if !moved {
			metrics.Pushes.WithLabelValues("error").Inc()
			return res, err
		}
		metrics.Pushes.WithLabelValues("rejected").Inc()
		log.Info("remote moved; rebuilding pending writes on the new tip", "attempt", attempt+1, "tip", w.tip.String())
	}
	return res, fmt.Errorf("the remote kept moving during %d push attempts: %w", w.cfg.PushAttempts, lastErr)
}

// errRemoteMoved says the remote branch is not where the writer built on.
var errRemoteMoved = errors.New("the remote branch moved")

// push sends exactly the objects this batch created and asks the remote to move the branch from
// base to newTip; the remote refuses when the branch is no longer at base (compare-and-swap).
// Unlike a generic push it never walks the history, so its cost follows the batch, not the
// repository's age.
func (w *Writer) push(ctx context.Context, base, newTip plumbing.Hash, objects []plumbing.Hash) error {
	ctx, ex, cancel := w.remote.begin(ctx)
	defer cancel()
	what := fmt.Sprintf("push %s to %s", w.cfg.Branch, w.remote.shown)
	sess, release, err := w.remote.receivePack(ctx, ex)
	if err != nil {
		return w.remote.describe(ctx, ex, what, err)
	}
	defer release()
	ar, err := sess.AdvertisedReferencesContext(ctx)
	if err != nil {
		return w.remote.describe(ctx, ex, what, err)
	}
	name := plumbing.NewBranchReferenceName(w.cfg.Branch)
	current := plumbing.ZeroHash
	if refs, err := ar.AllReferences(); err == nil {
		if ref, err := refs.Reference(name); err == nil {
			current = ref.Hash()
		}
	}
	if current != base {
		return fmt.Errorf("%s: %w (at %s, expected %s)", what, errRemoteMoved, current, base)
	}
	req := packp.NewReferenceUpdateRequestFromCapabilities(ar.Capabilities)
	req.Commands = []*packp.Command{{Name: name, Old: base, New: newTip}}
	rd, wr := io.Pipe()
	req.Packfile = rd
	encoded := make(chan error, 1)
	go func() {
		_, err := packfile.NewEncoder(wr, w.repo.Storer, false).Encode(dedupe(objects), 0)
		encoded <- wr.CloseWithError(err)
	}()
	rs, err := sess.ReceivePack(ctx, req)
	_ = rd.Close()
	if eerr := <-encoded; err == nil && eerr != nil {
		return fmt.Errorf("%s: encode the objects: %w", what, eerr)
	}
	if rs != nil && rs.Error() != nil {
		// The report's words are the remote's: only the fact is kept.
		err = errPushRefused
	}
	if err != nil {
		return w.remote.describe(ctx, ex, what, err)
	}
	_ = w.repo.Storer.SetReference(plumbing.NewHashReference(w.remoteRef(), newTip))
	return nil
}

func dedupe(hs []plumbing.Hash) []plumbing.Hash {
	seen := make(map[plumbing.Hash]struct{}, len(hs))
	out := hs[:0:0]
	for _, h := range hs {
		if _, ok := seen[h]; !ok {
			seen[h] = struct{}{}
			out = append(out, h)
		}
	}
	return out
}

func (w *Writer) recordCursors(ctx context.Context, ops []Op) {
	if w.cfg.Cursors == nil {
		return
	}
	type key struct {
		uid string
		gvr schema.GroupVersionResource
		ns  string
	}
	latest := map[key]string{}
	var order []key
	for _, op := range ops {
		c := op.Cursor
		if c.RV == "" || c.TargetUID == "" {
			continue
		}
		k := key{c.TargetUID, c.GVR, c.Namespace}
		if _, ok := latest[k]; !ok {
			order = append(order, k)
		}
		latest[k] = c.RV
	}
	var cerr error
	for _, k := range order {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		err := w.cfg.Cursors.RecordWatchCursor(rctx, k.uid, k.gvr, k.ns, latest[k])
		cancel()
		if err != nil {
			metrics.CursorWrites.WithLabelValues("error").Inc()
			cerr = err
			// One failure says the store is down; do not wait out a timeout per shard.
			break
		}
		metrics.CursorWrites.WithLabelValues("success").Inc()
	}
	if len(order) > 0 {
		w.setStatus(func(s *Status) { s.CursorError = cerr })
	}
}

type appliedChange struct {
	ops  []*Op
	path string
	verb string
	ref  string
}

// groupChanges tracks, for one commit, each touched path's state before the commit, so several
// ops on one path collapse into the one change the commit really makes.
type groupChanges struct {
	ix      *treeIndex
	order   []string
	touched map[string]*touchedPath
}

type touchedPath struct {
	baseHash   plumbing.Hash
	baseExists bool
	ops        []*Op
	ref        string
}

func (g *groupChanges) touch(p, ref string, op *Op) error {
	t := g.touched[p]
	if t == nil {
		h, ok, err := g.ix.get(p)
		if err != nil {
			return err
		}
		t = &touchedPath{baseHash: h, baseExists: ok}
		g.touched[p] = t
		g.order = append(g.order, p)
	}
	t.ops = append(t.ops, op)
	t.ref = ref
	return nil
}

// result lists the net changes of the group in the order paths were first touched.
func (g *groupChanges) result() ([]appliedChange, error) {
	var out []appliedChange
	for _, p := range g.order {
		t := g.touched[p]
		h, ok, err := g.ix.get(p)
		if err != nil {
			return nil, err
		}
		var verb string
		switch {
		case !t.baseExists && ok:
			verb = "CREATE"
		case t.baseExists && !ok:
			verb = "DELETE"
		case t.baseExists && ok && h != t.baseHash:
			verb = "UPDATE"
		default:
			continue
		}
		out = append(out, appliedChange{ops: t.ops, path: p, verb: verb, ref: t.ref})
	}
	return out, nil
}

// build writes the commits for ops on top of base and returns the new tip (base when nothing
// changed) and the changes that made it into a commit.
func (w *Writer) build(base plumbing.Hash, ops []Op, cmd *Command) (plumbing.Hash, []appliedChange, []plumbing.Hash, error) {
	s := w.repo.Storer
	var rootTree plumbing.Hash
	if !base.IsZero() {
		c, err := object.GetCommit(s, base)
		if err != nil {
			return base, nil, nil, fmt.Errorf("read tip commit %s: %w", base, err)
		}
		rootTree = c.TreeHash
	}
	ix := newTreeIndex(s, rootTree)
	w.store.tracking = true
	defer func() { w.store.tracking = false }()
	w.built = w.built[:0]
	w.commits, w.commandCommit = w.commits[:0], plumbing.ZeroHash
	parent := base
	parentTree := rootTree
	var all []appliedChange
	for _, group := range w.groups(ops, cmd) {
		g := &groupChanges{ix: ix, touched: map[string]*touchedPath{}}
		for i := range group {
			if err := w.apply(g, &group[i]); err != nil {
				return base, nil, nil, err
			}
		}
		applied, err := g.result()
		if err != nil {
			return base, nil, nil, err
		}
		if len(applied) == 0 {
			continue
		}
		tree, err := ix.write()
		if err != nil {
			return base, nil, nil, err
		}
		if tree == parentTree {
			continue
		}
		author := authorOf(*applied[0].ops[0], w.cfg.Committer)
		msg := message(applied)
		claimed := cmd.claims(*applied[0].ops[0], w.cfg.Committer)
		if claimed {
			author, msg = cmd.author(w.cfg.Committer), cmd.message()
		}
		now := time.Now()
		commit := &object.Commit{
			Author:    object.Signature{Name: author.Name, Email: author.Email, When: now},
			Committer: object.Signature{Name: w.cfg.Committer.Name, Email: w.cfg.Committer.Email, When: now},
			Message:   msg,
			TreeHash:  tree,
		}
		if !parent.IsZero() {
			commit.ParentHashes = []plumbing.Hash{parent}
		}
		obj := s.NewEncodedObject()
		if err := commit.Encode(obj); err != nil {
			return base, nil, nil, fmt.Errorf("encode commit: %w", err)
		}
		h, err := s.SetEncodedObject(obj)
		if err != nil {
			return base, nil, nil, fmt.Errorf("store commit: %w", err)
		}
		metrics.Commits.Inc()
		w.built = append(w.built, h)
		w.commits = append(w.commits, h)
		if claimed {
			w.commandCommit = h
		}
		parent, parentTree = h, tree
		all = append(all, applied...)
	}
	objects := append(slices.Clone(w.built), ix.written...)
	return parent, all, objects, nil
}

// groups splits ops into the commits they make: one per change when the window is 0, else one
// per run of consecutive changes by the same author (so per-event authors keep their order).
func (w *Writer) groups(ops []Op, cmd *Command) [][]Op {
	var out [][]Op
	start := 0
	for i := 1; i <= len(ops); i++ {
		if i < len(ops) && !w.splitBefore(ops[i-1], ops[i], cmd) {
			continue
		}
		out = append(out, ops[start:i])
		start = i
	}
	return out
}

func (w *Writer) splitBefore(prev, next Op, cmd *Command) bool {
	if next.Kind == OpMark {
		return false
	}
	if cp, cn := cmd.claims(prev, w.cfg.Committer), cmd.claims(next, w.cfg.Committer); cp || cn {
		// A command's changes make one commit, whatever the window; they never share it.
		return cp != cn
	}
	if w.cfg.Window == 0 {
		return true
	}
	return authorOf(prev, w.cfg.Committer) != authorOf(next, w.cfg.Committer)
}

func authorOf(op Op, committer Signature) Signature {
	if op.Change.Author != nil {
		return *op.Change.Author
	}
	return committer
}

func (w *Writer) apply(g *groupChanges, op *Op) error {
	ix := g.ix
	switch op.Kind {
	case OpUpsert:
		if err := g.touch(op.Change.Path, op.Change.Ref, op); err != nil {
			return err
		}
		h := plumbing.ComputeHash(plumbing.BlobObject, op.Change.Content)
		if old, exists, err := ix.get(op.Change.Path); err != nil || (exists && old == h) {
			return err
		}
		obj := w.repo.Storer.NewEncodedObject()
		obj.SetType(plumbing.BlobObject)
		wr, err := obj.Writer()
		if err != nil {
			return fmt.Errorf("write blob: %w", err)
		}
		if _, err := wr.Write(op.Change.Content); err != nil {
			return fmt.Errorf("write blob: %w", err)
		}
		_ = wr.Close()
		if _, err := w.repo.Storer.SetEncodedObject(obj); err != nil {
			return fmt.Errorf("store blob: %w", err)
		}
		w.built = append(w.built, h)
		return ix.set(op.Change.Path, h)
	case OpDelete:
		if err := g.touch(op.Change.Path, op.Change.Ref, op); err != nil {
			return err
		}
		_, err := ix.remove(op.Change.Path)
		return err
	case OpSweep:
		files, err := ix.files(op.SweepDir)
		if err != nil {
			return err
		}
		for _, f := range files {
			if _, keep := op.Keep[f]; keep {
				continue
			}
			name := strings.TrimSuffix(f[strings.LastIndex(f, "/")+1:], ".yaml")
			if err := g.touch(f, op.SweepRefPrefix+name, op); err != nil {
				return err
			}
			if _, err := ix.remove(f); err != nil {
				return err
			}
		}
	}
	return nil
}

// message is "[VERB] ref" for one change, and a summary with one line per change for a batch.
func message(applied []appliedChange) string {
	if len(applied) == 1 {
		return fmt.Sprintf("[%s] %s\n", applied[0].verb, applied[0].ref)
	}
	counts := map[string]int{}
	lines := make([]string, 0, len(applied))
	for _, a := range applied {
		counts[a.verb]++
		lines = append(lines, fmt.Sprintf("[%s] %s", a.verb, a.ref))
	}
	var parts []string
	for _, v := range []string{"CREATE", "UPDATE", "DELETE"} {
		if counts[v] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[v], strings.ToLower(v)))
		}
	}
	sort.Strings(lines)
	return fmt.Sprintf("[BATCH] %d changes (%s)\n\n%s\n", len(applied), strings.Join(parts, ", "), strings.Join(lines, "\n"))
}
