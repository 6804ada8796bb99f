package cli

import "github.com/spf13/cobra"

func newTenantCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "tenant", Short: "Manage tenant cache isolation"}
	cmd.AddCommand(pending("resync", "Force a resync of tenant Valkey ACL users"))
	return cmd
}
