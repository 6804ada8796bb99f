// Package watch runs one watch stream per (GitTarget, resource, namespace scope) and turns its
// events into writer ops. A stream resumes from its durable cursor; without one (or when the
// API server answers 410 Gone) it replays the current state with initial events (falling back to
// list+watch) and then sweeps the files of objects that no longer exist. Between replays it
// follows a Watcher, which shares one watch of the API server among all streams of a resource.
package watch

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/mirror/gitwriter"
	"github.com/siteops/siteops/internal/mirror/metrics"
	"github.com/siteops/siteops/internal/mirror/sanitize"
)

// Sink receives the stream's ops in order (the git writer).
type Sink interface {
	Enqueue(ctx context.Context, op gitwriter.Op) error
}

// CursorLookup reads durable cursors (the Redis store).
type CursorLookup interface {
	LookupWatchCursor(ctx context.Context, gitTargetUID string, gvr schema.GroupVersionResource, namespace string) (string, bool)
}

// Watcher opens a watch of a resource's objects in a namespace ("" for all) with every change
// after a resourceVersion (feed.Feeds: one shared watch per resource for all streams).
type Watcher interface {
	Watch(ctx context.Context, gvr schema.GroupVersionResource, namespace, rv string) (watch.Interface, error)
}

// Config describes one stream.
type Config struct {
	// Client reads the watched resource.
	Client dynamic.Interface
	// Watcher, when set, serves the stream's watches after a replay or from a cursor; without
	// it the stream watches the API server itself. Replays always read the API server.
	Watcher Watcher
	// GVR is the watched resource; Namespace its namespace ("" for a cluster-scoped resource).
	GVR       schema.GroupVersionResource
	Namespace string
	// LogValues name the stream in its log lines (key/value pairs, e.g. its target's name), with
	// the resource and the namespace. They are added when a line is written: a logger holding
	// values keeps an encoder buffer for as long as it lives, for each of thousands of streams.
	LogValues []any
	// TargetUID keys the cursor; BasePath is the GitTarget's folder.
	TargetUID string
	BasePath  string
	// IgnoreDeletes keeps files of deleted objects (GitTarget deletes: ignore).
	IgnoreDeletes bool
	// Operations are the event kinds to mirror; empty means all.
	Operations []mirrorv1alpha1.Operation
	// Sink receives ops; Cursors (may be nil) provides the resume position.
	Sink    Sink
	Cursors CursorLookup
	// IgnoreCursor replays even when a cursor exists: the target's spec changed, so files may be
	// missing at the new location.
	IgnoreCursor bool
	// OnReplay, when set, is called with the reason whenever a full replay starts.
	OnReplay func(reason string)
	// SubmitEvent, when set, receives the op of each live (not replayed) object event instead of
	// Sink, with the event's identity, so a per-event author can be resolved before the op
	// reaches the writer. exactCapable is false for removals (DELETED, or a deletionTimestamp),
	// whose resourceVersion never matches the deleting request's. Marks, sweeps and replayed
	// objects always go to Sink, which must share SubmitEvent's ordering.
	SubmitEvent func(ctx context.Context, op gitwriter.Op, uid types.UID, rv string, exactCapable bool) error
	// Secrets, when set, writes Secrets encrypted by it (the GitTarget opted in); without it
	// Secrets are never written.
	Secrets Encrypter
	// IgnoreFieldManagers are managers whose writes are not committed: an object whose last
	// writer (see LastWriter) is one of them is not written. Removals are always written.
	IgnoreFieldManagers []string
	// IgnoreUsers are users whose changes are not committed; author resolution (SubmitEvent's
	// implementation) applies them, as only the audit fact names the user.
	IgnoreUsers []string
}

// Encrypter turns a sanitized Secret into the file written for it (secretcrypt.Encrypter).
type Encrypter interface {
	Encrypt(ctx context.Context, path string, plaintext []byte) ([]byte, error)
	// Forget lets go of what is remembered for the file at path, whose Secret is gone.
	Forget(path string)
}

// Stream is one running watch.
type Stream struct {
	cfg Config
	gr  schema.GroupResource
}

// New returns a stream for cfg.
func New(cfg Config) *Stream {
	return &Stream{cfg: cfg, gr: cfg.GVR.GroupResource()}
}

// errGone says the watch's resourceVersion is too old: replay.
type errGone struct{ err error }

func (e errGone) Error() string { return e.err.Error() }

func (e errGone) Unwrap() error { return e.err }

// isGone reports whether err says the watch position no longer exists (410 Gone).
func isGone(err error) bool {
	var g errGone
	return errors.As(err, &g) || apierrors.IsGone(err) || apierrors.IsResourceExpired(err)
}

// logger is ctx's logger with the values that name the stream.
func (s *Stream) logger(ctx context.Context) logr.Logger {
	return logf.FromContext(ctx).WithValues(slices.Concat(s.cfg.LogValues, []any{"resource", s.gr.String(), "namespace", s.cfg.Namespace})...)
}

// Run watches until ctx ends, reconnecting with backoff.
func (s *Stream) Run(ctx context.Context) error {
	rv, ok := "", false
	if s.cfg.Cursors != nil && !s.cfg.IgnoreCursor {
		rv, ok = s.cfg.Cursors.LookupWatchCursor(ctx, s.cfg.TargetUID, s.cfg.GVR, s.cfg.Namespace)
	}
	replay := ""
	switch {
	case s.cfg.IgnoreCursor:
		replay = "spec-changed"
	case !ok:
		replay = "no-cursor"
	default:
		s.logger(ctx).Info("resuming watch from cursor", "resourceVersion", rv)
	}
	backoff := reconnectBackoff()
	for ctx.Err() == nil {
		var err error
		if replay != "" {
			metrics.Replays.WithLabelValues(replay).Inc()
			if s.cfg.OnReplay != nil {
				s.cfg.OnReplay(replay)
			}
			s.logger(ctx).Info("replaying current state", "reason", replay)
			rv, err = s.replay(ctx)
			if err == nil {
				replay = ""
			}
		}
		if err == nil {
			var progressed bool
			rv, progressed, err = s.watch(ctx, rv)
			if progressed {
				backoff = reconnectBackoff()
			}
		}
		if ctx.Err() != nil {
			return nil //nolint:nilerr // a stopped stream ends without error, whatever the watch said
		}
		if isGone(err) {
			s.logger(ctx).Info("watch cursor expired; replaying", "resourceVersion", rv)
			replay = "expired"
			continue
		}
		// A watch that ended without an error reconnects after the same wait; a failure doubles it.
		d := backoff.Duration
		if err != nil {
			d = backoff.Step()
			s.logger(ctx).Error(err, "watch failed; reconnecting", "in", d)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(d):
		}
	}
	return nil
}

// reconnectBackoff is the wait before a watch reconnects: 500 ms, doubling with each failure in
// a row up to 30 s, back to 500 ms once a watch made progress.
func reconnectBackoff() wait.Backoff {
	return wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Cap: 30 * time.Second, Steps: math.MaxInt32}
}

func (s *Stream) resource() dynamic.ResourceInterface {
	if s.cfg.Namespace == "" {
		return s.cfg.Client.Resource(s.cfg.GVR)
	}
	return s.cfg.Client.Resource(s.cfg.GVR).Namespace(s.cfg.Namespace)
}

// replay sends the current state followed by a sweep, and returns the resourceVersion to
// watch from. It uses initial events when the server offers them, else a paginated list.
func (s *Stream) replay(ctx context.Context) (string, error) {
	keep := map[string]struct{}{}
	mode := "initial-events"
	rv, err := s.initialEvents(ctx, keep)
	if err != nil {
		if ctx.Err() != nil {
			return "", err
		}
		s.logger(ctx).V(1).Info("initial events unavailable; listing", "error", err.Error())
		clear(keep)
		mode = "list"
		rv, err = s.list(ctx, keep)
	}
	if err != nil {
		return "", err
	}
	s.logger(ctx).Info("replayed current state", "mode", mode, "objects", len(keep), "resourceVersion", rv)
	op := gitwriter.Op{Kind: gitwriter.OpMark, Cursor: s.cursor(rv)}
	if !s.cfg.IgnoreDeletes {
		op.Kind = gitwriter.OpSweep
		op.SweepDir = sanitize.Dir(s.cfg.BasePath, s.gr, s.cfg.Namespace)
		op.Keep = keep
		op.SweepRefPrefix = s.cfg.GVR.GroupVersion().String() + "/" + s.gr.Resource + "/" + nsOrCluster(s.cfg.Namespace) + "/"
	}
	return rv, s.cfg.Sink.Enqueue(ctx, op)
}

func nsOrCluster(ns string) string {
	if ns == "" {
		return sanitize.ClusterScopeDir
	}
	return ns
}

// initialEvents streams the current state as ADDED events ending with the initial-events-end
// bookmark, then stops; the caller continues with a normal watch from the bookmark.
func (s *Stream) initialEvents(ctx context.Context, keep map[string]struct{}) (string, error) {
	send := true
	w, err := s.resource().Watch(ctx, metav1.ListOptions{
		SendInitialEvents:    &send,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		AllowWatchBookmarks:  true,
	})
	if err != nil {
		return "", err
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return "", fmt.Errorf("watch closed before the initial events ended")
			}
			switch ev.Type {
			case watch.Error:
				return "", apierrors.FromObject(ev.Object)
			case watch.Bookmark:
				obj, _ := ev.Object.(*unstructured.Unstructured)
				if obj != nil && obj.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
					return obj.GetResourceVersion(), nil
				}
			case watch.Added, watch.Modified:
				obj, _ := ev.Object.(*unstructured.Unstructured)
				if obj == nil {
					continue
				}
				if err := s.handle(ctx, watch.Added, obj, keep, true); err != nil {
					return "", err
				}
			}
		}
	}
}

func (s *Stream) list(ctx context.Context, keep map[string]struct{}) (string, error) {
	opts := metav1.ListOptions{Limit: 500}
	for {
		l, err := s.resource().List(ctx, opts)
		if err != nil {
			return "", fmt.Errorf("list %s: %w", s.gr, err)
		}
		for i := range l.Items {
			if err := s.handle(ctx, watch.Added, &l.Items[i], keep, true); err != nil {
				return "", err
			}
		}
		if l.GetContinue() == "" {
			return l.GetResourceVersion(), nil
		}
		opts.Continue = l.GetContinue()
	}
}

// watch follows changes from rv until the watch ends and returns the last resourceVersion seen
// and whether any event arrived.
func (s *Stream) watch(ctx context.Context, rv string) (string, bool, error) {
	w, err := s.open(ctx, rv)
	if err != nil {
		return rv, false, err
	}
	defer w.Stop()
	progressed := false
	for {
		select {
		case <-ctx.Done():
			return rv, progressed, nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return rv, progressed, nil
			}
			if ev.Type == watch.Error {
				err := apierrors.FromObject(ev.Object)
				if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
					return rv, progressed, errGone{err}
				}
				return rv, progressed, err
			}
			obj, _ := ev.Object.(*unstructured.Unstructured)
			if obj == nil {
				continue
			}
			progressed = true
			if ev.Type == watch.Bookmark {
				metrics.Events.WithLabelValues("bookmark").Inc()
				rv = obj.GetResourceVersion()
				if err := s.cfg.Sink.Enqueue(ctx, gitwriter.Op{Kind: gitwriter.OpMark, Cursor: s.cursor(rv)}); err != nil {
					return rv, progressed, err
				}
				continue
			}
			if err := s.handle(ctx, ev.Type, obj, nil, false); err != nil {
				return rv, progressed, err
			}
			rv = obj.GetResourceVersion()
		}
	}
}

// open starts the watch from rv: from the shared Watcher when there is one.
func (s *Stream) open(ctx context.Context, rv string) (watch.Interface, error) {
	if s.cfg.Watcher != nil {
		return s.cfg.Watcher.Watch(ctx, s.cfg.GVR, s.cfg.Namespace, rv)
	}
	timeout := int64(300 + rand.IntN(300))
	return s.resource().Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true, TimeoutSeconds: &timeout})
}

var secretsResource = schema.GroupResource{Resource: "secrets"}

func (s *Stream) cursor(rv string) gitwriter.Cursor {
	return gitwriter.Cursor{TargetUID: s.cfg.TargetUID, GVR: s.cfg.GVR, Namespace: s.cfg.Namespace, RV: rv}
}

func (s *Stream) allowed(op mirrorv1alpha1.Operation) bool {
	return len(s.cfg.Operations) == 0 || slices.Contains(s.cfg.Operations, op) || slices.Contains(s.cfg.Operations, mirrorv1alpha1.OperationAll)
}

// handle turns one object event into an op. During a replay, ops carry no cursor (initial
// events are not in resourceVersion order; the sweep carries it) and kept paths are collected.
func (s *Stream) handle(ctx context.Context, typ watch.EventType, obj *unstructured.Unstructured, keep map[string]struct{}, replaying bool) error {
	metrics.Events.WithLabelValues(strings.ToLower(string(typ))).Inc()
	now := time.Now()
	cursor := gitwriter.Cursor{}
	if !replaying {
		cursor = s.cursor(obj.GetResourceVersion())
	}
	mark := gitwriter.Op{Kind: gitwriter.OpMark, Cursor: cursor}
	path := sanitize.Path(s.cfg.BasePath, s.gr, obj.GetNamespace(), obj.GetName())
	ref := s.cfg.GVR.GroupVersion().String() + "/" + s.gr.Resource + "/" + nsOrCluster(obj.GetNamespace()) + "/" + obj.GetName()
	deleted := typ == watch.Deleted || obj.GetDeletionTimestamp() != nil
	secret := s.gr == secretsResource
	if deleted && secret && s.cfg.Secrets != nil {
		s.cfg.Secrets.Forget(path) // whatever happens below, its ciphertext is needed no more
	}
	if keep != nil && !deleted {
		// Kept even if skipped below: the sweep must not remove a file that a rule no longer
		// updates (operations filter) but whose object still exists.
		keep[path] = struct{}{}
	}
	if reason := sanitize.SkipReason(s.gr, obj); reason != "" && (!secret || s.cfg.Secrets == nil) {
		metrics.Events.WithLabelValues("skipped").Inc()
		return s.cfg.Sink.Enqueue(ctx, mark)
	}
	if !deleted && len(s.cfg.IgnoreFieldManagers) > 0 {
		if w := LastWriter(obj); w != "" && slices.Contains(s.cfg.IgnoreFieldManagers, w) {
			metrics.Events.WithLabelValues("ignored").Inc()
			return s.cfg.Sink.Enqueue(ctx, mark)
		}
	}
	var op mirrorv1alpha1.Operation
	switch {
	case deleted:
		op = mirrorv1alpha1.OperationDelete
	case typ == watch.Added:
		op = mirrorv1alpha1.OperationCreate
	default:
		op = mirrorv1alpha1.OperationUpdate
	}
	if !s.allowed(op) || (deleted && s.cfg.IgnoreDeletes) {
		return s.cfg.Sink.Enqueue(ctx, mark)
	}
	submit := s.cfg.Sink.Enqueue
	if s.cfg.SubmitEvent != nil && !replaying {
		submit = func(ctx context.Context, op gitwriter.Op) error {
			return s.cfg.SubmitEvent(ctx, op, obj.GetUID(), obj.GetResourceVersion(), !deleted)
		}
	}
	if deleted {
		return submit(ctx, gitwriter.Op{Kind: gitwriter.OpDelete, Change: gitwriter.Change{Path: path, Ref: ref, Kind: obj.GetKind(), Received: now}, Cursor: cursor})
	}
	content, err := sanitize.Object(obj)
	if err != nil {
		// A malformed object must not stop the stream: log it and move on.
		s.logger(ctx).Error(err, "sanitize object; skipped", "name", obj.GetName())
		return s.cfg.Sink.Enqueue(ctx, mark)
	}
	if secret {
		// Only the ciphertext leaves this function; errors never carry the plaintext.
		if content, err = s.cfg.Secrets.Encrypt(ctx, path, content); err != nil {
			s.logger(ctx).Error(err, "encrypt Secret; skipped", "name", obj.GetName())
			metrics.Events.WithLabelValues("skipped").Inc()
			return s.cfg.Sink.Enqueue(ctx, mark)
		}
	}
	return submit(ctx, gitwriter.Op{Kind: gitwriter.OpUpsert, Change: gitwriter.Change{Path: path, Content: content, Ref: ref, Kind: obj.GetKind(), Received: now}, Cursor: cursor})
}
