package mirror

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/siteops/siteops/internal/mirror/commitrequest"
	"github.com/siteops/siteops/internal/mirror/engine"
	"github.com/siteops/siteops/internal/mirror/gitwriter"
)

// closeTimeout bounds one CommitRequest's wait for its commit: a push round takes at most about
// two minutes (push and fetch each time out after one).
const closeTimeout = 3 * time.Minute

// windowCloser serves CommitRequests with the engine's writers.
type windowCloser struct {
	eng *engine.Engine
	// settle, when set, waits until the target's watch events that wait for their authors have
	// reached the writer, so the window holds the changes made just before the request.
	settle func(context.Context, types.NamespacedName)
}

// CloseWindow closes target's window through its writer; a target the engine does not run (not
// the leader yet, not applied yet, or its writer just restarted) is ErrTargetNotRunning, which
// the CommitRequest controller retries.
func (c windowCloser) CloseWindow(ctx context.Context, target types.NamespacedName, request types.UID, message string, author *gitwriter.Signature) (commitrequest.Closed, error) {
	// A writer that cannot reach its remote must not hold a reconcile worker forever; the
	// request is retried, and a push that still lands shows up as NothingPending then.
	ctx, cancel := context.WithTimeout(ctx, closeTimeout)
	defer cancel()
	if c.settle != nil {
		c.settle(ctx, target)
	}
	res, err := c.eng.CloseWindow(ctx, target, string(request), message, author)
	if notRunning(err) {
		return commitrequest.Closed{}, errors.Join(commitrequest.ErrTargetNotRunning, err)
	}
	if err != nil {
		return commitrequest.Closed{}, err
	}
	return commitrequest.Closed{Commit: res.Commit, Author: res.Author}, nil
}

// FindCommit returns the commit on target's branch made for request and its author; Commit is
// "" when none of the branch's recent commits was.
func (c windowCloser) FindCommit(ctx context.Context, target types.NamespacedName, request types.UID) (commitrequest.Closed, error) {
	ctx, cancel := context.WithTimeout(ctx, closeTimeout)
	defer cancel()
	res, err := c.eng.FindRequest(ctx, target, string(request))
	if notRunning(err) {
		return commitrequest.Closed{}, errors.Join(commitrequest.ErrTargetNotRunning, err)
	}
	return commitrequest.Closed{Commit: res.Commit, Author: res.Author}, err
}

// notRunning reports whether err says the target has no running writer (not the leader yet, not
// applied yet, or its writer just restarted).
func notRunning(err error) bool {
	return errors.Is(err, engine.ErrNotStarted) || errors.Is(err, engine.ErrUnknownTarget) || errors.Is(err, gitwriter.ErrWriterStopped)
}
