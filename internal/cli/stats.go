package cli

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/siteops/siteops/internal/inspect"
)

// statsOptions are the flags of `siteops stats`.
type statsOptions struct {
	kubeFlags
	allNamespaces bool
	output        string
}

func newStatsCommand() *cobra.Command {
	o := statsOptions{output: outputTable}
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Count siteops objects by state, with bytes stored, pods confirmed, mirror lag, tenants provisioned",
		Example: "  siteops stats -A\n" +
			"  siteops stats -n sites-shop -o json",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := validStructuredOutput(o.output); err != nil {
				return err
			}
			c, ns, err := o.client()
			if err != nil {
				return err
			}
			g := getter{c: c, kinds: getKinds, scope: scope{namespace: ns, allNamespaces: o.allNamespaces}, fallback: ns,
				out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr()}
			byKind, _, err := g.listAll(cmd.Context(), true)
			if err != nil {
				return err
			}
			var all []inspect.Summary
			for _, k := range getKinds {
				all = append(all, byKind[k.kind]...)
			}
			stats := inspect.Stats(all, time.Now())
			if o.output != outputTable {
				return printStructured(g.out, o.output, struct {
					Kinds []inspect.KindStats `json:"kinds"`
				}{Kinds: append([]inspect.KindStats{}, stats...)})
			}
			_, err = fmt.Fprint(g.out, statsTable(stats))
			return err
		},
	}
	f := cmd.Flags()
	o.bind(f, "namespace to count (default: the context's namespace)")
	f.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "count in every namespace your credentials can read")
	f.StringVarP(&o.output, "output", "o", o.output, "output format: table, json or yaml")
	return cmd
}

// statsTable is one line per kind: counts by state, then what the kind adds up to.
func statsTable(stats []inspect.KindStats) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 3, ' ', 0)
	fmt.Fprintln(tw, "KIND\tTOTAL\tREADY\tPROGRESSING\tFAILING\tSUSPENDED\tUNKNOWN\tDETAILS")
	for _, k := range stats {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", k.Kind, k.Total, k.States[inspect.StateReady], k.States[inspect.StateProgressing],
			k.States[inspect.StateFailing], k.States[inspect.StateSuspended], k.States[inspect.StateUnknown], statsDetails(k))
	}
	_ = tw.Flush() // into a strings.Builder, which never fails
	return b.String()
}

func statsDetails(k inspect.KindStats) string {
	var parts []string
	switch k.Kind {
	case inspect.KindDecofile:
		parts = append(parts, inspect.ByteSize(k.Bytes)+" stored")
		if k.Pods != nil {
			parts = append(parts, fmt.Sprintf("%d/%d pods confirmed", k.Pods.Confirmed, k.Pods.Total))
		}
	case inspect.KindGitTarget:
		parts = append(parts, fmt.Sprintf("%d changes pending", k.Pending))
		if k.OldestPushSeconds > 0 {
			parts = append(parts, "oldest push with pending changes "+duration.HumanDuration(time.Duration(k.OldestPushSeconds)*time.Second)+" ago")
		}
	case inspect.KindTenant:
		parts = append(parts, fmt.Sprintf("%d provisioned", k.Provisioned))
	}
	return strings.Join(parts, ", ")
}
