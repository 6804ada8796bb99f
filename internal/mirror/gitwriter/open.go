package gitwriter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/siteops/siteops/internal/mirror/metrics"
)

// ErrRemoteUnavailable says the writer could not open its remote yet (the first fetch failed),
// so it cannot commit now; it keeps trying with backoff. The error returned by CloseWindow
// wraps it with the last failure.
var ErrRemoteUnavailable = errors.New("the git remote could not be opened yet")

// DefaultStopTimeout bounds the last push of a stopping writer when Config.StopTimeout is 0.
const DefaultStopTimeout = 10 * time.Second

// openBackoff is the wait between failed attempts to open the remote: RetryInterval doubling
// up to a minute, with jitter so writers of one failed host do not retry in step.
func (w *Writer) openBackoff() wait.Backoff {
	return wait.Backoff{Duration: w.cfg.RetryInterval, Factor: 2, Jitter: 0.1, Steps: math.MaxInt32, Cap: time.Minute}
}

// openRemote opens the remote, retrying with backoff until it succeeds or ctx ends. Each attempt
// runs on its own goroutine so that the writer keeps answering commands meanwhile: while an
// attempt has already failed, a CloseWindow gets ErrRemoteUnavailable with the failure at once
// instead of waiting for the remote (the first attempt is waited for: a healthy remote opens in
// moments). It returns false when ctx ended before an attempt opened the remote, after the
// running attempt returned.
func (w *Writer) openRemote(ctx context.Context) bool {
	log := logf.FromContext(ctx).WithValues("remote", w.remote.shown, "branch", w.cfg.Branch)
	backoff := w.openBackoff()
	var lastErr error
	for {
		result := make(chan error, 1)
		go func() { result <- w.open(ctx) }()
		var retry <-chan time.Time
	attempt:
		for {
			commands, finds := w.commands, w.finds
			if lastErr == nil {
				commands, finds = nil, nil
			}
			select {
			case err := <-result:
				if err == nil {
					return true
				}
				if ctx.Err() != nil {
					return false
				}
				lastErr = err
				in := backoff.Step()
				log.Error(err, "open the git remote; retrying", "in", in.Round(time.Millisecond))
				w.setStatus(func(s *Status) { s.LastError = err })
				retry = time.After(in)
				result = nil
			case <-retry:
				break attempt
			case req := <-commands:
				metrics.CommandsRefused.Inc()
				req.done <- commandOutcome{err: fmt.Errorf("%w: %w", ErrRemoteUnavailable, lastErr)}
			case req := <-finds:
				req.done <- commandOutcome{err: fmt.Errorf("%w: %w", ErrRemoteUnavailable, lastErr)}
			case <-ctx.Done():
				if result != nil {
					// The attempt's exchange ends with ctx; wait so it no longer touches the writer.
					// An attempt that opened the remote all the same counts, as when its result wins.
					return <-result == nil
				}
				return false
			}
		}
	}
}
