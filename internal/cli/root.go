// Package cli implements the siteops command line (also usable as `kubectl siteops`).
package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/siteops/siteops/internal/version"
)

// NewRootCommand builds the siteops command with every subcommand.
func NewRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "siteops",
		Short:         "Operate tenant sites on Kubernetes: Decofiles, cache isolation, git mirror, delivery waves",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(
		newVersionCommand(),
		newDevCommand(),
		newDecofileCommand(),
		newSiteCommand(),
		newTenantCommand(),
		newCatalogCommand(),
		newWavesCommand(),
	)
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the siteops version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "siteops %s %s\n", version.Version, version.Commit())
			return err
		},
	}
}
