package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/siteops/siteops/internal/devenv"
)

func newDevTenantCommand() *cobra.Command {
	tenant := &cobra.Command{Use: "tenant", Short: "Manage tenants of a running `siteops dev up`"}
	tenant.AddCommand(newDevTenantAddCommand())
	return tenant
}

func newDevTenantAddCommand() *cobra.Command {
	o := devenv.TenantOptions{AdminKubeconfig: ".siteops/kubeconfig", TokenTTL: devenv.DefaultTenantTokenTTL}
	cmd := &cobra.Command{
		Use:   "add NAME",
		Short: "Create a tenant: namespace NAME and a user bound to edit there only, with its own kubeconfig",
		Long: "Against a running `siteops dev up` (its admin kubeconfig), creates namespace NAME, a\n" +
			"ServiceAccount NAME in it bound to the built-in edit ClusterRole in NAME only (which dev up\n" +
			"aggregates siteops' tenant roles into), and writes a kubeconfig that authenticates with a\n" +
			"token of that ServiceAccount. It prints the kubeconfig's path. Running it again keeps what\n" +
			"exists and writes a fresh token.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name = args[0]
			path, err := devenv.AddTenant(cmd.Context(), o)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "tenant %s: namespace %s, ServiceAccount %s/%s bound to edit there; token valid for %s\n", o.Name, o.Name, o.Name, o.Name, o.TokenTTL)
			fmt.Fprintln(cmd.OutOrStdout(), path)
			return nil
		},
	}
	cmd.Flags().StringVar(&o.AdminKubeconfig, "kubeconfig", o.AdminKubeconfig, "admin kubeconfig of the running `siteops dev up`")
	cmd.Flags().StringVar(&o.Out, "out", "", "where to write the tenant's kubeconfig (default: tenants/NAME.kubeconfig next to --kubeconfig)")
	cmd.Flags().DurationVar(&o.TokenTTL, "token-ttl", o.TokenTTL, "how long the tenant's token is valid")
	return cmd
}
