package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/siteops/siteops/internal/waves"
	"github.com/siteops/siteops/internal/waves/blast"
	"github.com/siteops/siteops/internal/waves/catalog"
	"github.com/siteops/siteops/internal/waves/emit"
	"github.com/siteops/siteops/internal/waves/lint"
	"github.com/siteops/siteops/internal/waves/plan"
	"github.com/siteops/siteops/internal/waves/repo"
)

// errProblems makes a command exit non-zero after it printed its findings.
var errProblems = errors.New("problems found")

func newCatalogCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "catalog", Short: "Render service definitions into manifests"}
	cmd.AddCommand(newCatalogRenderCommand())
	return cmd
}

func newCatalogRenderCommand() *cobra.Command {
	var out string
	var waveLayout, noImageAutomation bool
	cmd := &cobra.Command{
		Use:   "render catalog/<svc>.yaml -o apps",
		Short: "Render a service definition's manifests (<svc>.yaml, and <svc>-db.yaml with a database)",
		Long: "Render a ServiceDefinition into <svc>.yaml (and <svc>-db.yaml with a CloudNativePG Cluster when it\n" +
			"declares a database). With --wave-layout the files go to <out>/wave-<N>/, the waves being computed\n" +
			"from the catalog folder the definition lives in.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := os.ReadFile(args[0])
			if err != nil {
				return fmt.Errorf("read service definition: %w", err)
			}
			sd, err := catalog.ParseServiceDefinition(data)
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			files, err := catalog.Render(sd, catalog.RenderOptions{NoImageAutomation: noImageAutomation})
			if err != nil {
				return err
			}
			dir := map[string]string{}
			if waveLayout {
				c, err := catalog.LoadDir(filesys.MakeFsOnDisk(), filepath.Dir(args[0]))
				if err != nil {
					return err
				}
				w, err := c.Waves()
				if err != nil {
					return err
				}
				for _, f := range files {
					n, _ := w.Wave(f.Node)
					dir[f.Node] = plan.Dir(n)
				}
			}
			for _, f := range files {
				p := filepath.Join(out, dir[f.Node], f.File)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					return fmt.Errorf("create output folder: %w", err)
				}
				if err := os.WriteFile(p, f.Data, 0o644); err != nil {
					return fmt.Errorf("write %s: %w", p, err)
				}
				fmt.Fprintln(cmd.OutOrStdout(), "wrote", p)
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "apps", "folder to write the manifests into")
	cmd.Flags().BoolVar(&waveLayout, "wave-layout", false, "write into <output>/wave-<N>/ by the computed wave")
	cmd.Flags().BoolVar(&noImageAutomation, "no-image-automation", false, "leave out Flux image-automation setter markers")
	return cmd
}

// repoFlags are the flags every repository command shares.
type repoFlags struct {
	dir, catalog, apps, clusters string
	prefix, root                 string
	granularity                  string
}

func (f *repoFlags) bind(fs *pflag.FlagSet) {
	fs.StringVar(&f.dir, "repo", ".", "repository root")
	fs.StringVar(&f.catalog, "catalog", "", "catalog folder (default <repo>/catalog)")
	fs.StringVar(&f.apps, "apps", repo.DefaultLayout.Apps, "apps folder, relative to the repository root")
	fs.StringVar(&f.clusters, "clusters", repo.DefaultLayout.Clusters, "clusters folder, relative to the repository root")
	fs.StringVar(&f.prefix, "prefix", plan.DefaultOptions.Prefix, "wave Kustomizations are named <prefix>-wave-<N>")
	fs.StringVar(&f.root, "root", plan.DefaultOptions.Root, "Kustomization the first wave depends on")
	fs.StringVar(&f.granularity, "granularity", "", "one Flux Kustomization per wave or per service (default: the layout the repository has, else wave)")
}

func (f *repoFlags) layout() repo.Layout {
	l := repo.Layout{Catalog: "catalog", Apps: f.apps, Clusters: f.clusters}
	if f.catalog != "" {
		abs, _ := filepath.Abs(f.catalog)
		root, _ := filepath.Abs(f.dir)
		if rel, err := filepath.Rel(root, abs); err == nil {
			l.Catalog = rel
		}
	}
	return l
}

func (f *repoFlags) planOptions() plan.Options {
	return plan.Options{Prefix: f.prefix, Root: f.root, Granularity: plan.Granularity(f.granularity)}
}

func (f *repoFlags) load() (*waves.State, error) {
	if err := f.checkGranularity(); err != nil {
		return nil, err
	}
	if f.dir == "." && f.catalog != "" {
		// A bare --catalog names the catalog; the repository is its parent.
		f.dir = filepath.Dir(filepath.Clean(f.catalog))
	}
	r, err := repo.OnDisk(f.dir, f.layout())
	if err != nil {
		return nil, err
	}
	return waves.Load(r, f.planOptions())
}

func (f *repoFlags) checkGranularity() error {
	switch plan.Granularity(f.granularity) {
	case "", plan.ByWave, plan.ByService:
		return nil
	}
	return fmt.Errorf("--granularity %q: want wave or service", f.granularity)
}

func newWavesCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "waves", Short: "Plan, emit, lint and check dependency-ordered Flux waves"}
	cmd.AddCommand(newWavesPrintCommand(), newWavesPlanCommand(), newWavesEmitCommand(), newWavesLintCommand(), newWavesCutoverCommand(), newWavesGraphCommand(), newWavesBlastCommand())
	return cmd
}

type nodeRow struct {
	Node   string   `json:"node"`
	Wave   int      `json:"wave"`
	Kind   string   `json:"kind"`
	Reason string   `json:"reason"`
	Path   []string `json:"path"`
	// Blast counts what a failure of the node blocks: under the wave chain and exactly.
	Blast diagramBlast `json:"blast"`
}

type diagramBlast struct {
	Chain int `json:"chain"`
	Exact int `json:"exact"`
}

func newWavesPrintCommand() *cobra.Command {
	var f repoFlags
	var output string
	cmd := &cobra.Command{
		Use:   "print --catalog DIR",
		Short: "Print each node's wave, its blast radius (chain/exact) and the dependency path that decided it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := f.load()
			if err != nil {
				return err
			}
			var rows []nodeRow
			radii := blast.All(s.Waves, blast.OptionsFor(s.Catalog, s.Waves, s.Plan))
			for _, n := range s.Waves.Nodes() {
				wv, _ := s.Waves.Wave(n)
				b := diagramBlast{Chain: len(radii[n].Chain), Exact: len(radii[n].Exact)}
				rows = append(rows, nodeRow{Node: n, Wave: wv, Kind: string(s.Waves.Kind(n)), Reason: s.Waves.Reason(n), Path: s.Waves.Path(n), Blast: b})
			}
			switch output {
			case "json":
				return writeJSON(cmd.OutOrStdout(), rows)
			case "table":
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "WAVE\tNODE\tKIND\tBLAST\tREASON\tPATH")
				for _, r := range rows {
					fmt.Fprintf(tw, "%d\t%s\t%s\t%d/%d\t%s\t%s\n", r.Wave, r.Node, r.Kind, r.Blast.Chain, r.Blast.Exact, r.Reason, strings.Join(r.Path, " → "))
				}
				return tw.Flush()
			}
			return fmt.Errorf("-o %q: want table or json", output)
		},
	}
	f.bind(cmd.Flags())
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json")
	return cmd
}

type planJSON struct {
	Waves     map[int][]string `json:"waves"`
	Groups    []plan.Group     `json:"kustomizations"`
	NotPlaced []plan.Node      `json:"notPlaced,omitempty"`
	Unmatched []string         `json:"unmatched,omitempty"`
	Misplaced []string         `json:"misplaced,omitempty"`
}

func newWavesPlanCommand() *cobra.Command {
	var f repoFlags
	var output string
	cmd := &cobra.Command{
		Use:   "plan --repo DIR",
		Short: "Map the committed app files to waves",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := f.load()
			if err != nil {
				return err
			}
			var misplaced []string
			for file, cur := range s.Present {
				if g, ok := s.Plan.GroupOf(file); ok && cur != g.Dir+"/"+file {
					misplaced = append(misplaced, fmt.Sprintf("%s/%s -> %s/%s/%s", f.apps, cur, f.apps, g.Dir, file))
				}
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), planJSON{Waves: s.Plan.Waves(), Groups: s.Plan.Groups, NotPlaced: s.Plan.NotPlaced, Unmatched: s.Plan.Unmatched, Misplaced: misplaced})
			}
			out := cmd.OutOrStdout()
			for _, g := range s.Plan.Groups {
				extra := ""
				if g.NonGating {
					extra = " (non-gating)"
				}
				fmt.Fprintf(out, "wave %d  %s%s  dependsOn %s  ./%s/%s\n", g.Wave, g.Name, extra, strings.Join(g.DependsOn, ","), f.apps, g.Dir)
				for _, file := range g.Files {
					fmt.Fprintf(out, "    %s\n", file)
				}
			}
			for _, n := range s.Plan.NotPlaced {
				fmt.Fprintf(out, "computed but not placed (no committed files): %s (wave %d)\n", n.Name, n.Wave)
			}
			for _, u := range s.Plan.Unmatched {
				fmt.Fprintf(out, "unmatched file (no service, database or extra unit claims it): %s\n", u)
			}
			for _, m := range sortedStrings(misplaced) {
				fmt.Fprintf(out, "to move: %s\n", m)
			}
			return nil
		},
	}
	f.bind(cmd.Flags())
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	return cmd
}

func newWavesEmitCommand() *cobra.Command {
	var f repoFlags
	var o emit.Options
	cmd := &cobra.Command{
		Use:   "emit --repo DIR [--move]",
		Short: "Generate the wave kustomizations, the Flux Kustomization chain and the decryption patches",
		Long: "Generate apps/wave-<N>/kustomization.yaml and clusters/base/<prefix>-wave-<N>.yaml, keep\n" +
			"clusters/base/kustomization.yaml and every clusters/<env>/kustomization.yaml decryption patch in step\n" +
			"(comments are kept). --move places the app files into their wave folders by renaming them. Once\n" +
			"every file sits in its wave, the pre-split `apps` Kustomization and apps/kustomization.yaml are\n" +
			"removed (run `siteops waves cutover-check` before merging that). A second run changes nothing.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := f.load()
			if err != nil {
				return err
			}
			if len(s.Plan.Unmatched) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: files no node claims stay where they are: %s\n", strings.Join(s.Plan.Unmatched, ", "))
			}
			o.Plan = f.planOptions()
			changes, err := emit.Emit(s.Repo, s.Plan, o)
			for _, c := range changes {
				fmt.Fprintln(cmd.OutOrStdout(), c)
			}
			if err != nil {
				return err
			}
			if len(changes) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "up to date")
			}
			return nil
		},
	}
	f.bind(cmd.Flags())
	fs := cmd.Flags()
	fs.BoolVar(&o.Move, "move", false, "move app files into their wave folders (byte-identical renames)")
	fs.BoolVar(&o.DryRun, "dry-run", false, "print the changes without making them")
	fs.DurationVar(&o.Interval, "interval", 0, "interval of the wave Kustomizations (default: the existing apps Kustomization's)")
	fs.DurationVar(&o.RetryInterval, "retry-interval", 0, "retryInterval (default: the existing apps Kustomization's)")
	fs.DurationVar(&o.Timeout, "timeout", 0, "timeout (default: the existing apps Kustomization's)")
	fs.StringVar(&o.SourceKind, "source-kind", "", "sourceRef kind (default: the existing apps Kustomization's)")
	fs.StringVar(&o.SourceName, "source-name", "", "sourceRef name (default: the existing apps Kustomization's)")
	fs.StringSliceVar(&o.SubstituteFrom, "substitute-from", nil, "postBuild.substituteFrom entries as Kind/name (default: the existing apps Kustomization's)")
	fs.StringVar(&o.Namespace, "namespace", "", "namespace of the Kustomizations (default: the existing apps Kustomization's)")
	fs.StringVar(&o.DecryptionSecret, "decryption-secret", "sops-age", "SOPS key Secret a new decryption patch names when an environment has none to copy")
	return cmd
}

func newWavesLintCommand() *cobra.Command {
	var f repoFlags
	var o lint.Options
	cmd := &cobra.Command{
		Use:   "lint --repo DIR",
		Short: "Check the wave layout; one line per problem, non-zero exit on any",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.checkGranularity(); err != nil {
				return err
			}
			r, err := repo.OnDisk(f.dir, f.layout())
			if err != nil {
				return err
			}
			o.Plan = f.planOptions()
			res := lint.Run(r, o)
			for _, p := range res.Problems {
				fmt.Fprintln(cmd.OutOrStdout(), p)
			}
			if len(res.Problems) > 0 {
				return fmt.Errorf("%w: %d", errProblems, len(res.Problems))
			}
			if res.Granularity == plan.ByService {
				fmt.Fprintf(cmd.OutOrStdout(), "ok: %d Kustomizations by service, %d resources\n", res.Waves, res.Resources)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ok: %d waves, %d resources\n", res.Waves, res.Resources)
			return nil
		},
	}
	f.bind(cmd.Flags())
	cmd.Flags().StringVar(&o.CompareRef, "compare-ref", "", "git ref of the pre-split layout whose build must hold the same resources")
	return cmd
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func sortedStrings(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}
