package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/siteops/siteops/internal/waves"
	"github.com/siteops/siteops/internal/waves/blast"
	"github.com/siteops/siteops/internal/waves/plan"
)

func newWavesBlastCommand() *cobra.Command {
	var f repoFlags
	var output string
	cmd := &cobra.Command{
		Use:   "blast SERVICE --repo DIR",
		Short: "Show what a failing node blocks under the wave chain and under exact per-service dependencies",
		Long: "Show what a failing node (a service, database or extra unit) holds back. Under the wave chain its wave\n" +
			"Kustomization is not ready, so every higher wave (and the non-gating units that wait for its wave or a\n" +
			"higher one) waits. Under exact dependencies (`waves emit --granularity service`) only the nodes that\n" +
			"depend on it, directly or through others, wait. Only placed nodes are counted.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := f.load()
			if err != nil {
				return err
			}
			r, err := blast.Of(s.Waves, args[0], blast.OptionsFor(s.Catalog, s.Waves, s.Plan))
			if err != nil {
				return err
			}
			switch output {
			case "json":
				return writeJSON(cmd.OutOrStdout(), r)
			case "text":
				printBlast(cmd.OutOrStdout(), s, r)
				return nil
			}
			return fmt.Errorf("-o %q: want text or json", output)
		},
	}
	f.bind(cmd.Flags())
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	return cmd
}

func printBlast(w io.Writer, s *waves.State, r blast.Radius) {
	owner := "not placed"
	for _, f := range plan.FilesOf(s.Catalog, s.Waves, r.Node) {
		if g, ok := s.Plan.GroupOf(f); ok {
			owner = g.Name
			break
		}
	}
	fmt.Fprintf(w, "a failing %s (wave %d, %s) blocks:\n", r.Node, r.Wave, owner)
	chain, exact := " (this repository's layout)", ""
	if s.Plan.Granularity == plan.ByService {
		chain, exact = "", " (this repository's layout)"
	}
	fmt.Fprintf(w, "  under the wave chain%s: %d\n", chain, len(r.Chain))
	byWave(w, s, r.Chain)
	fmt.Fprintf(w, "  under exact dependencies (--granularity service)%s: %d\n", exact, len(r.Exact))
	byWave(w, s, r.Exact)
}

func byWave(w io.Writer, s *waves.State, nodes []string) {
	rows := map[int][]string{}
	var order []int
	for _, n := range nodes {
		wv, _ := s.Waves.Wave(n)
		if _, ok := rows[wv]; !ok {
			order = append(order, wv)
		}
		rows[wv] = append(rows[wv], n)
	}
	for _, wv := range order {
		fmt.Fprintf(w, "    wave %d: %s\n", wv, strings.Join(rows[wv], " "))
	}
}
