package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/siteops/siteops/internal/waves/diagram"
)

func newWavesGraphCommand() *cobra.Command {
	var f repoFlags
	var output string
	cmd := &cobra.Command{
		Use:   "graph --repo DIR [-o dot|mermaid|json]",
		Short: "Draw the dependency graph: nodes by wave, edges, extra units, non-gating and not-placed nodes",
		Long: "Draw the dependency graph of the catalog with each node's wave, the Kustomization that applies it and\n" +
			"its blast radius (chain/exact). An arrow points from what must be healthy first to what waits for it.\n" +
			"-o dot renders with Graphviz (`siteops waves graph -o dot | dot -Tsvg > waves.svg`); -o mermaid\n" +
			"pastes into a pull request inside a ```mermaid fence; -o json is for other tools.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := f.load()
			if err != nil {
				return err
			}
			g := diagram.New(s.Catalog, s.Waves, s.Plan)
			switch output {
			case "dot":
				return g.Dot(cmd.OutOrStdout())
			case "mermaid":
				return g.Mermaid(cmd.OutOrStdout())
			case "json":
				return g.JSON(cmd.OutOrStdout())
			}
			return fmt.Errorf("-o %q: want dot, mermaid or json", output)
		},
	}
	f.bind(cmd.Flags())
	cmd.Flags().StringVarP(&output, "output", "o", "dot", "dot, mermaid or json")
	return cmd
}
