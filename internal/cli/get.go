package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/inspect"
)

// getOptions are the flags of `siteops get`.
type getOptions struct {
	kubeFlags
	allNamespaces  bool
	output         string
	watch          bool
	statusSelector string
}

func newGetCommand() *cobra.Command {
	o := getOptions{output: outputTable}
	cmd := &cobra.Command{
		Use:   "get decofiles|tenants|gittargets|watchrules|all [NAME]",
		Short: "List siteops objects with their state, failing ones first",
		Long: "One line per object with what a person needs: the revision it holds, when it last delivered or\n" +
			"pushed, the pods that confirmed it, the rollout step and why it is not ready. Objects that need\n" +
			"attention come first. Reads with your own credentials: where they do not allow a list across\n" +
			"namespaces, -A shows your context's namespace and says so.",
		Example: "  siteops get decofiles -n sites-shop\n" +
			"  siteops get all -A --status-selector ready=false\n" +
			"  siteops get decofile shop -w\n" +
			"  siteops get tenants -A -o json",
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			kinds, err := kindsNamed(args[0])
			if err != nil {
				return err
			}
			if err := validOutput(o.output); err != nil {
				return err
			}
			sel, err := inspect.ParseStatusSelector(o.statusSelector)
			if err != nil {
				return err
			}
			c, ns, err := o.client()
			if err != nil {
				return err
			}
			g := getter{c: c, kinds: kinds, scope: scope{namespace: ns, allNamespaces: o.allNamespaces}, fallback: ns,
				selector: sel, output: o.output, out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr()}
			if len(args) == 2 {
				g.name = args[1]
			}
			if o.watch {
				return g.watch(cmd.Context())
			}
			return g.get(cmd.Context())
		},
	}
	f := cmd.Flags()
	o.bind(f, "namespace to list (default: the context's namespace)")
	f.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "list in every namespace your credentials can read")
	f.StringVarP(&o.output, "output", "o", o.output, "output format: table, wide, json or yaml")
	f.BoolVarP(&o.watch, "watch", "w", false, "after listing, show each change as it happens (in place on a terminal)")
	f.StringVar(&o.statusSelector, "status-selector", "", "only objects whose conditions match, such as ready=false")
	return cmd
}

// getter lists (and watches) the summaries one `siteops get` shows.
type getter struct {
	c        client.WithWatch
	kinds    []getKind
	scope    scope
	fallback string
	name     string
	selector inspect.StatusSelector
	output   string
	out      io.Writer
	errOut   io.Writer
	now      func() time.Time
}

func (g *getter) clock() time.Time {
	if g.now != nil {
		return g.now()
	}
	return time.Now()
}

// keep reports whether s belongs in the output.
func (g *getter) keep(s inspect.Summary) bool {
	return (g.name == "" || s.Name == g.name) && g.selector.Matches(s)
}

// listAll lists every kind; it returns the summaries by kind and each kind's resource version.
func (g *getter) listAll(ctx context.Context, notes bool) (map[string][]inspect.Summary, map[string]string, error) {
	byKind := map[string][]inspect.Summary{}
	versions := map[string]string{}
	for _, k := range g.kinds {
		ss, rv, note, err := k.list(ctx, g.c, g.scope, g.fallback)
		if err != nil {
			return nil, nil, err
		}
		if note != "" && notes {
			fmt.Fprintln(g.errOut, note)
		}
		var kept []inspect.Summary
		for _, s := range ss {
			if g.keep(s) {
				kept = append(kept, s)
			}
		}
		inspect.Sort(kept)
		byKind[k.kind], versions[k.kind] = kept, rv
	}
	return byKind, versions, nil
}

// get prints the objects once.
func (g *getter) get(ctx context.Context) error {
	byKind, _, err := g.listAll(ctx, true)
	if err != nil {
		return err
	}
	return g.print(byKind)
}

// print writes every summary in the chosen format.
func (g *getter) print(byKind map[string][]inspect.Summary) error {
	if g.output == outputJSON || g.output == outputYAML {
		list := summaryList{Items: []inspect.Summary{}}
		for _, k := range g.kinds {
			list.Items = append(list.Items, byKind[k.kind]...)
		}
		return printStructured(g.out, g.output, list)
	}
	lines := g.style(false).render(g.kinds, byKind)
	if len(lines) == 0 {
		_, err := fmt.Fprintln(g.errOut, g.nothingFound())
		return err
	}
	_, err := fmt.Fprintln(g.out, strings.Join(lines, "\n"))
	return err
}

func (g *getter) nothingFound() string {
	where := "in namespace " + g.scope.namespace
	if g.scope.allNamespaces {
		where = "in any namespace"
	}
	what := make([]string, 0, len(g.kinds))
	for _, k := range g.kinds {
		what = append(what, k.names[0])
	}
	return fmt.Sprintf("no %s found %s", strings.Join(what, " or "), where)
}

func (g *getter) style(color bool) tableStyle {
	return tableStyle{wide: g.output == outputWide, allNamespaces: g.scope.allNamespaces, color: color, now: g.clock()}
}

// terminal reports whether out is a terminal: colors and in-place updates only there.
func terminal(out io.Writer) bool {
	f, ok := out.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// watchPoll is how often a kind is read again when the caller may list but not watch it.
const watchPoll = 2 * time.Second

// change is one object's new summary (deleted: gone).
type change struct {
	kind    string
	key     string
	summary inspect.Summary
	deleted bool
}

// watch lists, prints, then prints each change until ctx ends. On a terminal the table is
// redrawn in place; otherwise each change is one line (JSON: one object per line), as kubectl
// get -w prints.
func (g *getter) watch(ctx context.Context) error {
	byKind, versions, err := g.listAll(ctx, true)
	if err != nil {
		return err
	}
	tty := terminal(g.out) && g.output != outputJSON && g.output != outputYAML
	current := map[string]map[string]inspect.Summary{}
	for _, k := range g.kinds {
		current[k.kind] = map[string]inspect.Summary{}
		for _, s := range byKind[k.kind] {
			current[k.kind][s.Ref()] = s
		}
	}
	drawn := 0
	redraw := func() {
		lines := g.style(true).render(g.kinds, sortedByKind(current))
		if drawn > 0 {
			fmt.Fprintf(g.out, "\033[%dA\033[J", drawn)
		}
		fmt.Fprintln(g.out, strings.Join(lines, "\n"))
		drawn = len(lines)
	}
	if tty {
		redraw()
	} else if err := g.print(byKind); err != nil {
		return err
	}
	changes := make(chan change)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, k := range g.kinds {
		var listed []string
		for ref := range current[k.kind] {
			listed = append(listed, ref)
		}
		go g.follow(ctx, k, versions[k.kind], listed, changes)
	}
	for {
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return nil
			}
			return ctx.Err()
		case ch := <-changes:
			old, had := current[ch.kind][ch.key]
			switch {
			case ch.deleted && !had:
				continue
			case ch.deleted:
				delete(current[ch.kind], ch.key)
				ch.summary = old
				ch.summary.Message = "deleted"
			case !g.keep(ch.summary):
				if !had {
					continue
				}
				delete(current[ch.kind], ch.key)
			case had && sameSummary(old, ch.summary):
				continue
			default:
				current[ch.kind][ch.key] = ch.summary
			}
			if tty {
				redraw()
				continue
			}
			if err := g.printChange(ch); err != nil {
				return err
			}
		}
	}
}

// printChange writes one change as a line (or a JSON object).
func (g *getter) printChange(ch change) error {
	if g.output == outputJSON || g.output == outputYAML {
		return printStructured(g.out, outputJSON, ch.summary)
	}
	lines := g.style(false).tableLines(ch.kind, []inspect.Summary{ch.summary})
	_, err := fmt.Fprintln(g.out, lines[len(lines)-1])
	return err
}

// sameSummary reports whether a change would print the same line (pointed-to values compared).
func sameSummary(a, b inspect.Summary) bool {
	return reflect.DeepEqual(a, b)
}

// sortedByKind is the current summaries of each kind in display order.
func sortedByKind(current map[string]map[string]inspect.Summary) map[string][]inspect.Summary {
	out := map[string][]inspect.Summary{}
	for kind, m := range current {
		ss := make([]inspect.Summary, 0, len(m))
		for _, s := range m {
			ss = append(ss, s)
		}
		inspect.Sort(ss)
		out[kind] = ss
	}
	return out
}

// follow sends every change of kind k from resource version rv. A watch that ends (its
// version expired, the API server restarted) is followed by a fresh list, which also reports
// what changed meanwhile; a caller that may not watch the kind gets it read every watchPoll.
func (g *getter) follow(ctx context.Context, k getKind, rv string, listed []string, changes chan<- change) {
	send := func(ch change) bool {
		select {
		case changes <- ch:
			return true
		case <-ctx.Done():
			return false
		}
	}
	seen := map[string]bool{}
	relist := func() bool {
		ss, v, _, err := k.list(ctx, g.c, g.scope, g.fallback)
		if err != nil {
			return ctx.Err() == nil
		}
		now := map[string]bool{}
		for _, s := range ss {
			now[s.Ref()] = true
			if !send(change{kind: k.kind, key: s.Ref(), summary: s}) {
				return false
			}
		}
		for ref := range seen {
			if !now[ref] && !send(change{kind: k.kind, key: ref, deleted: true}) {
				return false
			}
		}
		seen, rv = now, v
		return true
	}
	for _, ref := range listed {
		seen[ref] = true
	}
	for ctx.Err() == nil {
		w, err := g.watchKind(ctx, k, rv)
		if err != nil {
			select {
			case <-time.After(watchPoll):
			case <-ctx.Done():
				return
			}
			if !relist() {
				return
			}
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				break // an expired version or a server error: the relist below catches up
			}
			if ev.Type == watch.Bookmark {
				continue
			}
			s, ok := k.summarize(ev.Object)
			if !ok {
				continue
			}
			if acc, err := meta.Accessor(ev.Object); err == nil {
				rv = acc.GetResourceVersion()
			}
			deleted := ev.Type == watch.Deleted
			if deleted {
				delete(seen, s.Ref())
			} else {
				seen[s.Ref()] = true
			}
			if !send(change{kind: k.kind, key: s.Ref(), summary: s, deleted: deleted}) {
				w.Stop()
				return
			}
		}
		w.Stop()
		if !relist() {
			return
		}
	}
}

// watchKind opens a watch of k in the getter's scope from rv.
func (g *getter) watchKind(ctx context.Context, k getKind, rv string) (watch.Interface, error) {
	opts := []client.ListOption{&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}}}
	if !k.clusterScoped && !g.scope.allNamespaces {
		opts = append(opts, client.InNamespace(g.scope.namespace))
	}
	return g.c.Watch(ctx, k.newList(), opts...)
}
