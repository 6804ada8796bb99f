package cli

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/tenant/provision"
)

func newTenantRotateCommand() *cobra.Command {
	var revokeNow bool
	var kubeconfig, kubeContext string
	cmd := &cobra.Command{
		Use:   "rotate NAMESPACE... [--revoke-now]",
		Short: "Rotate tenants' Valkey passwords",
		Long: "Sets the " + decov1.AnnotationValkeyACLRotate + " annotation of each named namespace to the current " +
			"time. The operator issues a new password, writes it to the namespace's " + decov1.ValkeyACLSecretName +
			" Secret and restarts the workloads that read it; the old password stays valid until they have " +
			"rolled out, and at most --valkey-rotation-max-grace (default 1h).\n\n" +
			"With --revoke-now (a leaked password) the namespace's " + provision.AnnotationRevoke + " annotation is set " +
			"too and the operator refuses the old password, and every earlier one, at once: pods that have not " +
			"restarted yet lose the cache until they do.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := kubeClient(kubeconfig, kubeContext)
			if err != nil {
				return err
			}
			done, err := provision.Rotate(cmd.Context(), c, args, strconv.FormatInt(time.Now().UnixNano(), 10), revokeNow)
			for _, ns := range done {
				if revokeNow {
					fmt.Fprintf(cmd.OutOrStdout(), "namespace/%s rotation requested, earlier passwords revoked at once\n", ns)
				} else {
					fmt.Fprintf(cmd.OutOrStdout(), "namespace/%s rotation requested\n", ns)
				}
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&revokeNow, "revoke-now", false, "refuse the old passwords at once instead of when the workloads have rolled out (pods not restarted yet lose the cache)")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	cmd.Flags().StringVar(&kubeContext, "context", "", "kubeconfig context to use")
	return cmd
}
