// Package engine runs the mirror's watch streams and git writers on the elected leader: one
// writer per (namespace, GitProvider, repository, branch), one stream per (GitTarget, resource,
// namespace scope), all streams of a resource following one shared watch of it (package feed).
// Writers are never shared across namespaces or providers: a writer pushes with one provider's
// credentials and commits as its committer, so a target can never push with, or close the
// window of, another tenant's writer. The GitTarget controller tells it the desired state with
// Apply and Remove; the engine starts, restarts and stops what changed.
package engine

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/mirror/feed"
	"github.com/siteops/siteops/internal/mirror/gitwriter"
	"github.com/siteops/siteops/internal/mirror/secretcrypt"
	"github.com/siteops/siteops/internal/mirror/watch"
)

// CursorStore reads and records durable watch cursors (the Redis store).
type CursorStore interface {
	watch.CursorLookup
	gitwriter.CursorRecorder
}

// WriterSpec identifies a writer and the settings it runs with.
type WriterSpec struct {
	// Owner names the GitProvider whose credentials and committer the writer uses
	// ("namespace/name"). Targets share a writer only with the same owner, in one namespace.
	Owner       string
	URL, Branch string
	Auth        transport.AuthMethod
	// AuthVersion changes whenever the credentials change (the Secret's resourceVersion).
	AuthVersion string
	Committer   gitwriter.Signature
	Window      time.Duration
	// Signer signs every commit; nil makes unsigned commits. SigningVersion changes whenever
	// the key or the signing settings do.
	Signer         gitwriter.Signer
	SigningVersion string
}

// StreamSpec is one watch of a target.
type StreamSpec struct {
	GVR        schema.GroupVersionResource
	Namespace  string
	Operations []mirrorv1alpha1.Operation
	// IgnoreFieldManagers and IgnoreUsers are writers whose changes are not committed (the
	// rules' ignore lists; see watch.Config).
	IgnoreFieldManagers []string
	IgnoreUsers         []string
}

func sameStream(a, b StreamSpec) bool {
	return slices.Equal(a.Operations, b.Operations) && slices.Equal(a.IgnoreFieldManagers, b.IgnoreFieldManagers) && slices.Equal(a.IgnoreUsers, b.IgnoreUsers)
}

// SecretsSpec makes a target write Secrets, SOPS-encrypted to Recipients (sorted, see
// secretcrypt.ParseRecipients); HashKey keys the HMAC that recognises unchanged Secrets.
type SecretsSpec struct {
	Recipients []string
	HashKey    []byte
}

func sameSecrets(a, b *SecretsSpec) bool {
	if a == nil || b == nil {
		return a == b
	}
	return slices.Equal(a.Recipients, b.Recipients) && string(a.HashKey) == string(b.HashKey)
}

// TargetSpec is the desired state of one GitTarget.
type TargetSpec struct {
	UID           string
	Path          string
	IgnoreDeletes bool
	Writer        WriterSpec
	Streams       []StreamSpec
	// Replay makes streams started by this Apply ignore their cursors: the target's spec
	// changed since its cursors were recorded (a new path, branch or repository).
	Replay bool
	// Secrets, when set, writes the Secrets the streams select, encrypted; nil never does.
	Secrets *SecretsSpec
}

// TargetStatus is what the engine observes for one target.
type TargetStatus struct {
	Streams int
	Writer  gitwriter.Status
	// Replays counts full replays since the target started, by reason.
	Replays map[string]int
}

type streamKey struct {
	gvr schema.GroupVersionResource
	ns  string
}

type targetRun struct {
	spec    TargetSpec
	secrets *secretcrypt.Encrypter
	writer  string
	// streams are the target's running streams: one map of pointers, since even a map of one
	// entry holds a group of eight slots, for each of a thousand targets.
	streams map[streamKey]*streamRun
	replays map[string]int
}

// streamRun is a running stream and the spec it was started with.
type streamRun struct {
	run  *runner
	spec StreamSpec
}

type writerRun struct {
	key  string
	spec WriterSpec
	w    *gitwriter.Writer
	run  *runner
	// refs are the targets using the writer. Guarded by refsMu (not Engine.mu): the writer's
	// status callback reads it from the writer's goroutine.
	refsMu sync.Mutex
	refs   map[types.NamespacedName]bool
}

func (wr *writerRun) setRef(t types.NamespacedName, on bool) int {
	wr.refsMu.Lock()
	defer wr.refsMu.Unlock()
	if on {
		wr.refs[t] = true
	} else {
		delete(wr.refs, t)
	}
	return len(wr.refs)
}

func (wr *writerRun) refList() []types.NamespacedName {
	wr.refsMu.Lock()
	defer wr.refsMu.Unlock()
	return slices.Collect(maps.Keys(wr.refs))
}

// Engine is a manager Runnable that needs leader election.
type Engine struct {
	dyn     dynamic.Interface
	cursors CursorStore
	// feeds serves every stream's watch from one shared watch per resource.
	feeds *feed.Feeds
	// OnTargetChange is called with a target whenever its writer's status changes (a push, a
	// failure), so its controller can record status. It must not block.
	OnTargetChange func(types.NamespacedName)
	// WriterHook, when set, adjusts every writer's config before it starts (tests, benchmarks).
	WriterHook func(*gitwriter.Config)
	// StreamHook, when set, adjusts every watch stream's config before it starts: per-event
	// author resolution wraps cfg.Sink and sets cfg.SubmitEvent here. uid is the GitTarget's.
	StreamHook func(target types.NamespacedName, uid string, cfg *watch.Config)
	// StreamEndHook, when set, is told of every watch stream that stopped (a rule or target
	// gone, or about to restart), so what StreamHook set up for it can be let go.
	StreamEndHook func(target types.NamespacedName, gvr schema.GroupVersionResource, namespace string)
	// SecretCache, when set, remembers the ciphertexts of encrypted Secrets across restarts
	// (Redis), so an unchanged Secret is not re-encrypted into a new diff.
	SecretCache secretcrypt.Cache
	// StopTimeout bounds the last push of every stopping writer (gitwriter.Config.StopTimeout),
	// and so how long the engine takes to stop once its context ends: writers stop in
	// parallel. 0 means gitwriter.DefaultStopTimeout.
	StopTimeout time.Duration

	// mu guards the maps below; it is never held while waiting for a stream or writer to stop
	// (see lifecycle.go), so one tenant's slow remote cannot hold another tenant's Apply.
	mu      sync.Mutex
	statsMu sync.Mutex
	ctx     context.Context
	started chan struct{}
	targets map[types.NamespacedName]*targetRun
	writers map[string]*writerRun
	// gates hold, by writer key and by stream, the end of the last runner stopping there: its
	// successor starts after it (see launch).
	gates map[string]<-chan struct{}
	// stopping counts the runners stopping in the background.
	stopping sync.WaitGroup
	// commits records what the writers pushed, per target.
	commits *CommitLog
}

// New returns an engine reading with dyn and keeping cursors in cursors (nil: no cursors).
func New(dyn dynamic.Interface, cursors CursorStore) *Engine {
	return &Engine{dyn: dyn, cursors: cursors, feeds: feed.New(dyn), started: make(chan struct{}), targets: map[types.NamespacedName]*targetRun{}, writers: map[string]*writerRun{},
		gates: map[string]<-chan struct{}{}, commits: NewCommitLog(CommitsPerTarget, CommitsTotal)}
}

// Commits returns the record of the commits the engine's writers pushed lately, per GitTarget.
func (e *Engine) Commits() *CommitLog { return e.commits }

// NeedLeaderElection makes only the leader run watches and writers.
func (e *Engine) NeedLeaderElection() bool { return true }

// Start runs until ctx ends, then stops every stream and writer at once (writers push what they
// hold, each within StopTimeout) and returns when they all stopped, or StopTimeout plus a margin
// after ctx ended, whichever is first.
func (e *Engine) Start(ctx context.Context) error {
	e.mu.Lock()
	e.ctx = ctx
	close(e.started)
	e.mu.Unlock()
	<-ctx.Done()
	e.mu.Lock()
	for key, t := range e.targets {
		e.detachStreams(key, t, slices.Collect(maps.Keys(t.streams)))
		delete(e.targets, key)
	}
	for k, wr := range e.writers {
		e.retireWriter(wr, nil)
		delete(e.writers, k)
	}
	e.mu.Unlock()
	return e.waitStopped(logf.FromContext(ctx))
}

// ErrNotStarted says the engine is not running yet (not the leader); retry later.
var ErrNotStarted = errors.New("mirror engine not started yet")

func (e *Engine) running() bool {
	select {
	case <-e.started:
		return e.ctx.Err() == nil
	default:
		return false
	}
}

// writerKey identifies the writer of a target: the target's namespace (the engine's own, never
// from the spec), the owning provider, the repository and the branch. Targets of different
// namespaces or providers never share a writer, whatever URL they name.
func writerKey(target types.NamespacedName, s WriterSpec) string {
	return target.Namespace + "\x00" + s.Owner + "\x00" + s.URL + "#" + s.Branch
}

// Apply makes the running streams and writer of target match spec. Streams and writers it
// replaces stop in the background, and their successors start once they did (see launch).
func (e *Engine) Apply(target types.NamespacedName, spec TargetSpec) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.running() {
		return ErrNotStarted
	}
	t := e.targets[target]
	wk := writerKey(target, spec.Writer)
	if t != nil && (t.writer != wk || t.spec.UID != spec.UID || t.spec.Path != spec.Path || t.spec.IgnoreDeletes != spec.IgnoreDeletes || !sameSecrets(t.spec.Secrets, spec.Secrets)) {
		e.removeLocked(target)
		t = nil
	}
	if t == nil {
		t = &targetRun{streams: map[streamKey]*streamRun{}, replays: map[string]int{}}
		if spec.Secrets != nil {
			t.secrets = secretcrypt.New(spec.UID, spec.Secrets.Recipients, spec.Secrets.HashKey, e.SecretCache)
		}
		e.targets[target] = t
	}
	t.spec, t.writer = spec, wk
	e.commits.track(target, spec.UID)

	wr := e.writers[wk]
	desired := spec.Writer
	if wr != nil {
		// Writers shared by several targets batch with the shortest window among them.
		for _, ref := range wr.refList() {
			if ref != target && e.targets[ref] != nil && e.targets[ref].spec.Writer.Window < desired.Window {
				desired.Window = e.targets[ref].spec.Writer.Window
			}
		}
		if !sameWriter(wr.spec, desired) {
			e.restartWriter(wr, desired)
		}
	} else {
		wr = e.startWriter(wk, desired)
	}
	wr.setRef(target, true)

	want := map[streamKey]StreamSpec{}
	for _, s := range spec.Streams {
		want[streamKey{s.GVR, s.Namespace}] = s
	}
	var stale []streamKey
	for k, r := range t.streams {
		if s, ok := want[k]; !ok || !sameStream(s, r.spec) {
			stale = append(stale, k)
		}
	}
	e.detachStreams(target, t, stale)
	for k, s := range want {
		if _, running := t.streams[k]; !running {
			e.startStream(target, t, wr, s)
		}
	}
	return nil
}

func sameWriter(a, b WriterSpec) bool {
	return a.Owner == b.Owner && a.URL == b.URL && a.Branch == b.Branch && a.AuthVersion == b.AuthVersion && a.Committer == b.Committer && a.Window == b.Window && a.SigningVersion == b.SigningVersion
}

// Remove stops the streams of target and releases its writer. It does not wait for them: they
// stop in the background (a writer after its last push), and whatever replaces them starts
// once they did.
func (e *Engine) Remove(target types.NamespacedName) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.removeLocked(target)
}

// Forget is Remove for a GitTarget that was deleted or left this shard: its commits are dropped
// from the record too, and commits its writer still pushes are not recorded.
func (e *Engine) Forget(target types.NamespacedName) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.removeLocked(target)
	e.commits.forget(target)
}

func (e *Engine) removeLocked(target types.NamespacedName) {
	t := e.targets[target]
	if t == nil {
		return
	}
	stopped := e.detachStreams(target, t, slices.Collect(maps.Keys(t.streams)))
	delete(e.targets, target)
	if wr := e.writers[t.writer]; wr != nil {
		if wr.setRef(target, false) == 0 {
			e.retireWriter(wr, stopped)
			delete(e.writers, t.writer)
		}
	}
}

// Status reports what the engine runs for target.
func (e *Engine) Status(target types.NamespacedName) (TargetStatus, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	t := e.targets[target]
	if t == nil {
		return TargetStatus{}, false
	}
	e.statsMu.Lock()
	st := TargetStatus{Streams: len(t.streams), Replays: maps.Clone(t.replays)}
	e.statsMu.Unlock()
	if wr := e.writers[t.writer]; wr != nil {
		st.Writer = wr.w.Status()
	}
	return st, true
}

// ErrUnknownTarget says the engine runs no GitTarget of that name (not applied yet, removed,
// or invalid).
var ErrUnknownTarget = errors.New("the GitTarget is not running in the mirror")

// Writer returns the git writer of target and the target's spec, the lookup commands use.
func (e *Engine) Writer(target types.NamespacedName) (*gitwriter.Writer, TargetSpec, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.running() {
		return nil, TargetSpec{}, ErrNotStarted
	}
	t := e.targets[target]
	if t == nil {
		return nil, TargetSpec{}, fmt.Errorf("%w: %s", ErrUnknownTarget, target)
	}
	wr := e.writers[t.writer]
	if wr == nil {
		return nil, TargetSpec{}, fmt.Errorf("%w: %s has no writer", ErrUnknownTarget, target)
	}
	return wr.w, t.spec, nil
}

// CloseWindow closes target's open commit window now and commits its pending changes with
// message, authored by author (nil: the committer), naming request in a trailer; see
// gitwriter.Writer.CloseWindow. The
// engine's lock is not held while the writer works, so watches and Apply carry on.
func (e *Engine) CloseWindow(ctx context.Context, target types.NamespacedName, request, message string, author *gitwriter.Signature) (gitwriter.CommandResult, error) {
	w, spec, err := e.Writer(target)
	if err != nil {
		return gitwriter.CommandResult{}, err
	}
	return w.CloseWindow(ctx, gitwriter.Command{Target: spec.UID, Path: spec.Path, Request: request, Message: message, Author: author})
}

// FindRequest returns the commit on target's branch made for request (a CommitRequest's UID)
// and its author; Commit is "" when none of the branch's recent commits was. See
// gitwriter.Writer.FindRequest.
func (e *Engine) FindRequest(ctx context.Context, target types.NamespacedName, request string) (gitwriter.CommandResult, error) {
	w, _, err := e.Writer(target)
	if err != nil {
		return gitwriter.CommandResult{}, err
	}
	return w.FindRequest(ctx, request)
}

// targetSink stamps every op with its GitTarget's UID on the way into the shared writer, so a
// CommitRequest claims only its own target's changes (whatever else the stream hook wraps).
type targetSink struct {
	w   *gitwriter.Writer
	uid string
}

// Enqueue hands op to the writer as the target's.
func (s targetSink) Enqueue(ctx context.Context, op gitwriter.Op) error {
	op.Target = s.uid
	return s.w.Enqueue(ctx, op)
}

// String describes the engine for logs.
func (e *Engine) String() string { return fmt.Sprintf("mirror engine (%d targets)", len(e.targets)) }
