package cli

import "github.com/spf13/cobra"

func newCatalogCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "catalog", Short: "Render service definitions into manifests"}
	cmd.AddCommand(pending("render", "Render a service definition's manifests"))
	return cmd
}

func newWavesCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "waves", Short: "Plan, emit, lint and check dependency-ordered Flux waves"}
	cmd.AddCommand(pending("print", "Print each node's wave"))
	return cmd
}
