package cli

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/tenant/provision"
)

func newTenantCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "tenant", Short: "Manage tenant cache isolation"}
	cmd.AddCommand(newTenantResyncCommand(), newTenantRotateCommand(), newTenantDoctorCommand())
	return cmd
}

func newTenantResyncCommand() *cobra.Command {
	var all bool
	var kubeconfig, kubeContext string
	cmd := &cobra.Command{
		Use:   "resync [--all | NAMESPACE...]",
		Short: "Force a resync of tenant Valkey ACL users",
		Long: "Sets the " + decov1.AnnotationValkeyACLSync + " annotation to the current time on the named " +
			"namespaces, or with --all on every namespace annotated " + decov1.AnnotationValkeyACL + "=true, so the " +
			"operator re-applies their ACL users on every Valkey node. Passwords do not change.",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := kubeClient(kubeconfig, kubeContext)
			if err != nil {
				return err
			}
			done, err := provision.ForceResync(cmd.Context(), c, all, args, strconv.FormatInt(time.Now().UnixNano(), 10))
			for _, ns := range done {
				fmt.Fprintf(cmd.OutOrStdout(), "namespace/%s resync requested\n", ns)
			}
			if err == nil && len(done) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "no namespace is annotated %s=true\n", decov1.AnnotationValkeyACL)
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "resync every namespace annotated "+decov1.AnnotationValkeyACL+"=true")
	cmd.Flags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	cmd.Flags().StringVar(&kubeContext, "context", "", "kubeconfig context to use")
	return cmd
}
