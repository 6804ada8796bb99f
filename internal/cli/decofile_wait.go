package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/decofile/follow"
)

// Exit codes of `siteops decofile wait`.
const (
	waitExitFailed  = 1
	waitExitTimeout = 2
)

// exitError carries a command's exit code to main (which honours ExitCode()).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// ExitCode is the process exit code: for `decofile wait` 1 when the rollout failed, 2 on
// timeout; for `trace` 1 when a link is not ready.
func (e *exitError) ExitCode() int { return e.code }

// decofileWaitOptions are the flags of `siteops decofile wait`.
type decofileWaitOptions struct {
	kubeFlags
	target  string
	timeout time.Duration
}

func newDecofileWaitCommand() *cobra.Command {
	o := decofileWaitOptions{target: follow.Current, timeout: 5 * time.Minute}
	cmd := &cobra.Command{
		Use:   "wait NAME",
		Short: "Wait until a Decofile's content is confirmed by every pod",
		Long: "Reads the Decofile and decides from its PodsNotified condition; otherwise watches it from the\n" +
			"version it read, so no update is missed. Exit status: 0 when PodsNotified=True for the awaited\n" +
			"version, 1 when False for it (or the Decofile is silent, or a progressive rollout rolled it back),\n" +
			"2 on timeout. A progressive rollout (spec.rollout) shows its step, phase and updated pods live.",
		Example: "  siteops decofile wait shop -n sites-shop --for commit:0123abc\n" +
			"  siteops decofile wait shop --for current --timeout 10m",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := follow.ValidTarget(o.target); err != nil {
				return err
			}
			c, ns, err := o.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
			defer cancel()
			return runDecofileWait(ctx, c, client.ObjectKey{Namespace: ns, Name: args[0]}, o.target, o.timeout, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	o.bind(f, "namespace of the Decofile (default: the context's namespace)")
	f.StringVar(&o.target, "for", o.target, "version to wait for: commit:<sha> (or its first 7+ characters, as the Commit column shows), timestamp:<unix seconds> or current")
	f.DurationVar(&o.timeout, "timeout", o.timeout, "give up after this long (exit status 2)")
	return cmd
}

// runDecofileWait waits and turns the verdict into output and an exit status. On a terminal the
// progress line is redrawn in place; otherwise each change is one plain line.
func runDecofileWait(ctx context.Context, c client.WithWatch, key client.ObjectKey, target string, timeout time.Duration, out io.Writer) error {
	tty := terminal(out)
	lastLine := ""
	show := func(v follow.Verdict) {
		line := waitProgressLine(v)
		if line == lastLine {
			return
		}
		lastLine = line
		if tty {
			fmt.Fprintf(out, "\r\033[K%s", line)
		} else {
			fmt.Fprintln(out, line)
		}
	}
	v, err := follow.Wait(ctx, c, key, target, func(v follow.Verdict) {
		if v.Outcome == follow.Pending {
			show(v)
		}
	})
	if tty && lastLine != "" {
		fmt.Fprint(out, "\r\033[K")
	}
	id := v.ID
	if id == "" {
		id = target
	}
	switch {
	case err != nil && errors.Is(err, context.DeadlineExceeded):
		return &exitError{code: waitExitTimeout, msg: fmt.Sprintf("timed out after %s waiting for %s of Decofile %s: %s", timeout, id, key, v.Message)}
	case err != nil:
		return err
	case v.Outcome == follow.Failed:
		return &exitError{code: waitExitFailed, msg: v.Message}
	}
	_, werr := fmt.Fprintf(out, "%s: %s\n", key, v.Message)
	return werr
}

// waitProgressLine is one line about a pending rollout. A progressive rollout (spec.rollout)
// shows its step and phase: "step 2/4 pausing: 3/30 pods updated, …", and a rollback as it runs.
func waitProgressLine(v follow.Verdict) string {
	ro := v.Rollout
	switch {
	case ro == nil:
		return v.Message
	case ro.Phase == "RollingBack":
		return fmt.Sprintf("%s: rolling back at step %d/%d: %s%s", v.ID, ro.Step, ro.Steps, v.Message, waitElapsed(ro.StartedAt))
	case ro.Steps > 0:
		return fmt.Sprintf("%s: step %d/%d %s: %d/%d pods updated, notified %d (failed %d, skipped %d)%s", v.ID, ro.Step, ro.Steps,
			strings.ToLower(ro.Phase), ro.Updated, ro.Total, ro.Notified, ro.Failed, ro.Skipped, waitElapsed(ro.StartedAt))
	}
	return fmt.Sprintf("%s: notified %d/%d pods (failed %d, skipped %d)%s", v.ID, ro.Notified, ro.Total, ro.Failed, ro.Skipped, waitElapsed(ro.StartedAt))
}

func waitElapsed(t *metav1.Time) string {
	if t == nil {
		return ""
	}
	return fmt.Sprintf(", %s elapsed", time.Since(t.Time).Round(time.Second))
}
