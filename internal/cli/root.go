// Package cli implements the siteops command line (also usable as `kubectl siteops`).
package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

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
	// Installed as kubectl-siteops, kubectl runs the binary for `kubectl siteops`: usage lines,
	// help and completion then show the command the user typed.
	if name, ok := strings.CutPrefix(filepath.Base(os.Args[0]), "kubectl-"); ok {
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl " + name}
	}
	root.AddCommand(
		newVersionCommand(),
		newGetCommand(),
		newStatsCommand(),
		newEventsCommand(),
		newTreeCommand(),
		newTraceCommand(),
		newSuspendCommand(),
		newResumeCommand(),
		newDevCommand(),
		newDecofileCommand(),
		newSiteCommand(),
		newTenantCommand(),
		newCatalogCommand(),
		newWavesCommand(),
		newMirrorCommand(),
		newUICommand(),
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
