package gitwriter

import (
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/siteops/siteops/internal/mirror/metrics"
)

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
		w.noteSweeps(ctx)
		if newTip == base {
			w.recordCursors(ctx, received)
			return res, nil
		}
		err = w.push(ctx, base, newTip, objects)
		if err == nil {
			now := time.Now()
			w.tip = newTip
			if err := w.store.trim(newTip); err != nil {
				// Nothing is lost: the objects stay until the next trim or reopen.
				log.Error(err, "forget the objects of earlier pushes")
			}
			metrics.Pushes.WithLabelValues("success").Inc()
			if w.cfg.OnCommits != nil && len(w.made) > 0 {
				made := slices.Clone(w.made)
				for i := range made {
					made[i].PushedAt = now
				}
				w.cfg.OnCommits(made)
			}
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

// noteSweeps records the sweeps of the last build: a refused one stays in Status.TooLarge
// (logged and reported once) until a sweep of the same folder runs.
func (w *Writer) noteSweeps(ctx context.Context) {
	if len(w.sweeps) == 0 {
		return
	}
	changed := false
	w.mu.Lock()
	for _, s := range w.sweeps {
		_, had := w.refusals[s.target][s.dir]
		if s.err == nil {
			w.refusals.clear(s.target, s.dir)
			changed = changed || had
			continue
		}
		if !had {
			logf.FromContext(ctx).Info("sweep refused; the target's other changes go on", "target", s.target, "reason", s.err.Error())
			changed = true
		}
		w.refusals.set(s.target, s.dir, s.err)
	}
	w.mu.Unlock()
	if changed {
		w.setStatus(func(*Status) {})
	}
}
