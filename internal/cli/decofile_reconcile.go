package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// decofileReconcileOptions are the flags of `siteops decofile reconcile`.
type decofileReconcileOptions struct {
	decofileWaitOptions
	noWait bool
}

func newDecofileReconcileCommand() *cobra.Command {
	o := decofileReconcileOptions{decofileWaitOptions: decofileWaitOptions{timeout: 2 * time.Minute}}
	cmd := &cobra.Command{
		Use:   "reconcile NAME",
		Short: "Re-resolve a Decofile's source now instead of at its next interval",
		Long: "Sets the " + decov1alpha1.AnnotationReconcileRequestedAt + " annotation to the current time; the operator\n" +
			"re-resolves the branch or tag at once and records the value in status.lastHandledReconcileAt.\n" +
			"Waits for that and prints the result unless --no-wait. Exit status: 0 when the Decofile is Ready\n" +
			"after the reconcile, 1 when it is not, 2 on timeout.",
		Example: "  siteops decofile reconcile shop -n sites-shop\n" +
			"  siteops decofile reconcile shop --no-wait",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ns, err := o.client()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
			defer cancel()
			return runDecofileReconcile(ctx, c, client.ObjectKey{Namespace: ns, Name: args[0]}, !o.noWait, o.timeout, cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	o.bind(f, "namespace of the Decofile (default: the context's namespace)")
	f.BoolVar(&o.noWait, "no-wait", false, "return once the reconcile is requested")
	f.DurationVar(&o.timeout, "timeout", o.timeout, "give up waiting after this long (exit status 2)")
	return cmd
}

// runDecofileReconcile requests the reconcile and, when wait is set, waits until the operator
// handled that request and reports the Decofile's Ready condition.
func runDecofileReconcile(ctx context.Context, c client.Client, key client.ObjectKey, waitFor bool, timeout time.Duration, out io.Writer) error {
	var df decov1alpha1.Decofile
	if err := c.Get(ctx, key, &df); err != nil {
		return fmt.Errorf("get Decofile %s: %w", key, err)
	}
	value := time.Now().UTC().Format(time.RFC3339Nano)
	orig := df.DeepCopy()
	if df.Annotations == nil {
		df.Annotations = map[string]string{}
	}
	df.Annotations[decov1alpha1.AnnotationReconcileRequestedAt] = value
	if err := c.Patch(ctx, &df, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("annotate Decofile %s: %w", key, err)
	}
	if !waitFor {
		_, err := fmt.Fprintf(out, "%s: reconcile requested (%s=%s)\n", key, decov1alpha1.AnnotationReconcileRequestedAt, value)
		return err
	}
	fmt.Fprintf(out, "%s: reconcile requested, waiting for the operator\n", key)
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, key, &df); err != nil {
			return false, fmt.Errorf("get Decofile %s: %w", key, err)
		}
		return df.Status.LastHandledReconcileAt == value, nil
	})
	if errors.Is(err, context.DeadlineExceeded) || (err != nil && ctx.Err() != nil) {
		return &exitError{code: waitExitTimeout, msg: fmt.Sprintf("timed out after %s waiting for the operator to handle the reconcile of Decofile %s: is the manager running?", timeout, key)}
	}
	if err != nil {
		return err
	}
	// Stored is what a reconcile does; the rollout to the pods that follows is `decofile wait`'s.
	ready := meta.FindStatusCondition(df.Status.Conditions, decov1alpha1.ConditionReady)
	if !df.Status.ContentStored() {
		msg := "not Ready"
		if ready != nil {
			msg = fmt.Sprintf("Ready=%s %s: %s", ready.Status, ready.Reason, ready.Message)
		}
		return &exitError{code: waitExitFailed, msg: fmt.Sprintf("%s: reconciled, %s", key, msg)}
	}
	commit := ""
	if df.Status.ShortCommit != "" {
		commit = " at commit " + df.Status.ShortCommit
	}
	_, err = fmt.Fprintf(out, "%s: reconciled%s: %s\n", key, commit, ready.Message)
	return err
}
