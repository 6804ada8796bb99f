package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"

	"github.com/siteops/siteops/internal/inspect"
)

// Output formats of `siteops get` and `siteops stats`.
const (
	outputTable = "table"
	outputWide  = "wide"
	outputJSON  = "json"
	outputYAML  = "yaml"
)

// validOutput checks -o.
func validOutput(o string) error {
	switch o {
	case outputTable, outputWide, outputJSON, outputYAML:
		return nil
	}
	return fmt.Errorf("unknown output format %q: use table, wide, json or yaml", o)
}

// validStructuredOutput checks -o of the commands that print a table, JSON or YAML.
func validStructuredOutput(o string) error {
	switch o {
	case outputTable, outputJSON, outputYAML:
		return nil
	}
	return fmt.Errorf("unknown output format %q: use table, json or yaml", o)
}

// summaryList is the stable -o json/yaml form of `siteops get`.
type summaryList struct {
	Items []inspect.Summary `json:"items"`
}

// printStructured writes v as JSON or YAML.
func printStructured(out io.Writer, format string, v any) error {
	if format == outputYAML {
		b, err := yaml.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode YAML: %w", err)
		}
		_, err = out.Write(b)
		return err
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// messageWidth bounds the MESSAGE column outside wide output.
const messageWidth = 72

// tableStyle says how rows are drawn.
type tableStyle struct {
	wide          bool
	allNamespaces bool
	color         bool
	now           time.Time
}

// column is one column of a kind's table.
type column struct {
	header string
	cell   func(inspect.Summary) string
}

// columns are the columns of kind's table in style st.
func (st tableStyle) columns(kind string) []column {
	var cols []column
	if st.allNamespaces && kind != inspect.KindTenant {
		cols = append(cols, column{"NAMESPACE", func(s inspect.Summary) string { return s.Namespace }})
	}
	name := "NAME"
	if kind == inspect.KindTenant {
		name = "NAMESPACE"
	}
	cols = append(cols,
		column{name, func(s inspect.Summary) string { return s.Name }},
		column{"STATE", st.stateCell},
	)
	switch kind {
	case inspect.KindDecofile:
		cols = append(cols,
			column{"REVISION", func(s inspect.Summary) string { return s.Revision }},
			column{"DELIVERED", st.sinceCell},
			column{"PODS", podsCell},
			column{"STEP", func(s inspect.Summary) string { return s.Step }},
		)
	case inspect.KindGitTarget:
		cols = append(cols,
			column{"COMMIT", func(s inspect.Summary) string { return s.Revision }},
			column{"PUSHED", st.sinceCell},
		)
	case inspect.KindWatchRule:
		cols = append(cols, column{"RESOURCES", func(s inspect.Summary) string { return s.Revision }})
	case inspect.KindTenant:
		cols = append(cols,
			column{"REVISION", func(s inspect.Summary) string { return s.Revision }},
			column{"ROTATING", st.sinceCell},
		)
	}
	if st.wide {
		cols = append(cols, column{"REASON", func(s inspect.Summary) string { return s.Reason }})
		for i, f := range inspect.WideFields(kind) {
			cols = append(cols, column{f, func(s inspect.Summary) string {
				if i < len(s.Wide) {
					return s.Wide[i].Value
				}
				return ""
			}})
		}
	}
	cols = append(cols,
		column{"AGE", func(s inspect.Summary) string { return duration.HumanDuration(st.now.Sub(s.Created)) }},
		column{"MESSAGE", st.messageCell},
	)
	return cols
}

func (st tableStyle) stateCell(s inspect.Summary) string {
	if !st.color {
		return string(s.State)
	}
	// Every state gets a code of the same length, so columns stay aligned on a terminal.
	code := map[inspect.State]string{inspect.StateFailing: "31", inspect.StateProgressing: "33", inspect.StateReady: "32", inspect.StateSuspended: "36"}[s.State]
	if code == "" {
		code = "90"
	}
	return "\033[" + code + "m" + string(s.State) + "\033[0m"
}

func (st tableStyle) sinceCell(s inspect.Summary) string {
	if s.LastChange == nil {
		return ""
	}
	return duration.HumanDuration(st.now.Sub(*s.LastChange))
}

func (st tableStyle) messageCell(s inspect.Summary) string {
	m := strings.Join(strings.Fields(s.Message), " ")
	if !st.wide && len(m) > messageWidth {
		m = m[:messageWidth-1] + "…"
	}
	return m
}

func podsCell(s inspect.Summary) string {
	if s.Pods == nil {
		return ""
	}
	return fmt.Sprintf("%d/%d", s.Pods.Confirmed, s.Pods.Total)
}

// tableLines renders one kind's summaries as aligned lines, the header first.
func (st tableStyle) tableLines(kind string, ss []inspect.Summary) []string {
	cols := st.columns(kind)
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 3, ' ', 0)
	for i, c := range cols {
		if i > 0 {
			fmt.Fprint(tw, "\t")
		}
		fmt.Fprint(tw, c.header)
	}
	fmt.Fprintln(tw)
	for _, s := range ss {
		for i, c := range cols {
			if i > 0 {
				fmt.Fprint(tw, "\t")
			}
			fmt.Fprint(tw, c.cell(s))
		}
		fmt.Fprintln(tw)
	}
	_ = tw.Flush() // into a strings.Builder, which never fails
	return strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
}

// render is the whole table output: one table per kind with objects, a blank line between them.
// With several kinds each table is headed by its kind, as `kubectl get all` does.
func (st tableStyle) render(kinds []getKind, byKind map[string][]inspect.Summary) []string {
	var lines []string
	shown := 0
	for _, k := range kinds {
		ss := byKind[k.kind]
		if len(ss) == 0 {
			continue
		}
		if shown > 0 {
			lines = append(lines, "")
		}
		shown++
		if len(kinds) > 1 {
			lines = append(lines, "# "+k.names[0])
		}
		lines = append(lines, st.tableLines(k.kind, ss)...)
	}
	return lines
}
