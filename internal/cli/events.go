package cli

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// siteopsReporterPrefix starts the reporting controller of every Event siteops records.
const siteopsReporterPrefix = "siteops-"

// eventsOptions are the flags of `siteops events`.
type eventsOptions struct {
	kubeFlags
	allNamespaces bool
	forObject     string
	types         []string
	watch         bool
}

func newEventsCommand() *cobra.Command {
	o := eventsOptions{}
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Show the Events siteops recorded, across its parts, newest last",
		Long: "Lists the Events whose reporting controller is one of siteops' (delivery, rollout, S3, tenant,\n" +
			"mirror), with the object and reason, oldest first so the newest is next to the prompt.",
		Example: "  siteops events -n sites-shop\n" +
			"  siteops events -A --types Warning\n" +
			"  siteops events --for decofile/shop -w",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ns, err := o.client()
			if err != nil {
				return err
			}
			f, err := newEventFilter(o.forObject, o.types)
			if err != nil {
				return err
			}
			e := eventLister{c: c, scope: scope{namespace: ns, allNamespaces: o.allNamespaces}, fallback: ns, filter: f,
				out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr()}
			return e.run(cmd.Context(), o.watch)
		},
	}
	f := cmd.Flags()
	o.bind(f, "namespace of the Events (default: the context's namespace)")
	f.BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "Events of every namespace your credentials can read")
	f.StringVar(&o.forObject, "for", "", "only Events about this object, Kind/name (decofile/shop, namespace/sites-shop)")
	f.StringSliceVar(&o.types, "types", nil, "only Events of these types (Normal, Warning)")
	f.BoolVarP(&o.watch, "watch", "w", false, "after listing, show Events as they are recorded")
	return cmd
}

// eventFilter selects siteops' Events.
type eventFilter struct {
	kind, name string
	types      []string
}

func newEventFilter(forObject string, types []string) (eventFilter, error) {
	f := eventFilter{}
	if forObject != "" {
		kind, name, ok := strings.Cut(forObject, "/")
		if !ok || kind == "" || name == "" {
			return f, fmt.Errorf("--for %q: want Kind/name, such as decofile/shop", forObject)
		}
		f.kind, f.name = kind, name
	}
	for _, t := range types {
		switch strings.ToLower(t) {
		case "normal":
			f.types = append(f.types, "Normal")
		case "warning":
			f.types = append(f.types, "Warning")
		default:
			return f, fmt.Errorf("--types %q: Event types are Normal and Warning", t)
		}
	}
	return f, nil
}

// matches reports whether e is siteops' and passes the filter.
func (f eventFilter) matches(e *eventsv1.Event) bool {
	if !strings.HasPrefix(e.ReportingController, siteopsReporterPrefix) {
		return false
	}
	if len(f.types) > 0 && !slices.Contains(f.types, e.Type) {
		return false
	}
	if f.kind != "" && (!strings.EqualFold(e.Regarding.Kind, f.kind) || e.Regarding.Name != f.name) {
		return false
	}
	return true
}

// eventTime is when an Event last happened.
func eventTime(e *eventsv1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.DeprecatedLastTimestamp.IsZero():
		return e.DeprecatedLastTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

// eventLister lists and watches siteops' Events.
type eventLister struct {
	c        client.WithWatch
	scope    scope
	fallback string
	filter   eventFilter
	out      io.Writer
	errOut   io.Writer
	// clock times the watches and the waits between them; nil means the real clock.
	clock clock.Clock
}

// watchSteadyAfter is how long a watch that delivered nothing must last for the next one to start
// at once: one that lasted this long is a server's timeout, not a refusal.
const watchSteadyAfter = 10 * time.Second

// watchRestartBackoff is the wait before a watch restarts after one that ended soon and delivered
// nothing: 500 ms, doubling with each such watch in a row up to 30 s.
func watchRestartBackoff() wait.Backoff {
	return wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Cap: 30 * time.Second, Steps: math.MaxInt32}
}

// list reads the matching Events in scope, oldest first, and the list's resource version.
func (e *eventLister) list(ctx context.Context) (evs []eventsv1.Event, rv, ns, note string, err error) {
	ns = e.scope.namespace
	if e.scope.allNamespaces {
		ns = ""
	}
	evs, rv, err = e.listPages(ctx, ns)
	if err != nil && apierrors.IsForbidden(err) && ns == "" && e.fallback != "" {
		note = "events: cannot list in all namespaces (forbidden); showing namespace " + e.fallback
		ns = e.fallback
		evs, rv, err = e.listPages(ctx, ns)
	}
	if err != nil {
		return nil, "", "", "", fmt.Errorf("list Events: %w", err)
	}
	slices.SortStableFunc(evs, func(a, b eventsv1.Event) int { return eventTime(&a).Compare(eventTime(&b)) })
	return evs, rv, ns, note, nil
}

// eventsPageSize is how many Events one list request reads: a cluster's Events (most of them
// not siteops') are read a page at a time, and only the matching ones are kept.
var eventsPageSize int64 = 500

// listPages reads the Events of ns page by page and keeps those that match; the resource version
// is the one the pages were read at.
func (e *eventLister) listPages(ctx context.Context, ns string) (evs []eventsv1.Event, rv string, err error) {
	next := ""
	for {
		var l eventsv1.EventList
		if err := e.c.List(ctx, &l, client.InNamespace(ns), client.Limit(eventsPageSize), client.Continue(next)); err != nil {
			return nil, "", err
		}
		for i := range l.Items {
			if e.filter.matches(&l.Items[i]) {
				evs = append(evs, l.Items[i])
			}
		}
		if next = l.Continue; next == "" {
			return evs, l.ResourceVersion, nil
		}
	}
}

// run prints the Events, then with follow each new one until ctx ends.
func (e *eventLister) run(ctx context.Context, follow bool) error {
	evs, rv, ns, note, err := e.list(ctx)
	if err != nil {
		return err
	}
	if note != "" {
		fmt.Fprintln(e.errOut, note)
	}
	now := time.Now()
	if len(evs) == 0 && !follow {
		_, err := fmt.Fprintln(e.errOut, "no siteops Events found")
		return err
	}
	tw := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LAST SEEN\tTYPE\tREASON\tOBJECT\tMESSAGE")
	printed := map[types.UID]string{}
	show := func(ev *eventsv1.Event, now time.Time) {
		if printed[ev.UID] == ev.ResourceVersion {
			return
		}
		printed[ev.UID] = ev.ResourceVersion
		fmt.Fprintln(tw, e.line(ev, now))
	}
	flush := func() error {
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("write Events: %w", err)
		}
		return nil
	}
	for i := range evs {
		show(&evs[i], now)
	}
	if err := flush(); err != nil || !follow {
		return err
	}
	clk := e.clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	backoff := watchRestartBackoff()
	for {
		from, started := rv, clk.Now()
		var expired bool
		rv, expired, err = e.watchFrom(ctx, ns, rv, func(ev *eventsv1.Event) error {
			show(ev, time.Now())
			return flush()
		})
		if ctx.Err() != nil {
			return nil //nolint:nilerr // the caller ending ctx is how -w stops; the watch's error then only reports that
		}
		if err != nil {
			return err
		}
		// An API server that closes every watch at once is asked again less and less often.
		if rv != from || clk.Since(started) >= watchSteadyAfter {
			backoff = watchRestartBackoff()
		} else if !waitFor(ctx, clk, backoff.Step()) {
			return nil
		}
		if !expired {
			continue
		}
		// What happened since the expired version, each Event once.
		if evs, rv, _, _, err = e.list(ctx); err == nil {
			for i := range evs {
				show(&evs[i], time.Now())
			}
			err = flush()
		}
		if ctx.Err() != nil {
			return nil //nolint:nilerr // as above: ctx ending stops -w
		}
		if err != nil {
			return err
		}
	}
}

// waitFor waits d on clk and reports whether it did, false when ctx ended first.
func waitFor(ctx context.Context, clk clock.Clock, d time.Duration) bool {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// watchFrom watches the Events of ns from resource version rv and passes each matching one to
// show, until the watch ends. It returns the version to watch from next, or expired when rv is
// too old to resume from and the Events must be listed again; any other error the watch reports
// is returned.
func (e *eventLister) watchFrom(ctx context.Context, ns, rv string, show func(*eventsv1.Event) error) (next string, expired bool, err error) {
	w, err := e.c.Watch(ctx, &eventsv1.EventList{}, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
	if err != nil {
		return rv, false, fmt.Errorf("watch Events: %w", err)
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			failed := apierrors.FromObject(ev.Object)
			if apierrors.IsResourceExpired(failed) || apierrors.IsGone(failed) {
				return rv, true, nil
			}
			return rv, false, fmt.Errorf("watch Events from resource version %s: %w", rv, failed)
		}
		x, ok := ev.Object.(*eventsv1.Event)
		if !ok {
			continue
		}
		// Every Event the watch delivers, siteops' or not, moves the version to resume from.
		rv = x.ResourceVersion
		if ev.Type == watch.Deleted || !e.filter.matches(x) {
			continue
		}
		if err := show(x); err != nil {
			return rv, false, err
		}
	}
	return rv, false, nil
}

// line is one Event as a table row.
func (e *eventLister) line(ev *eventsv1.Event, now time.Time) string {
	obj := strings.ToLower(ev.Regarding.Kind) + "/" + ev.Regarding.Name
	if e.scope.allNamespaces && ev.Regarding.Namespace != "" {
		obj = ev.Regarding.Namespace + "/" + obj
	}
	msg := strings.Join(strings.Fields(ev.Note), " ")
	count := ""
	if ev.Series != nil && ev.Series.Count > 1 {
		count = fmt.Sprintf(" (x%d)", ev.Series.Count)
	}
	return fmt.Sprintf("%s\t%s\t%s\t%s\t%s%s", duration.HumanDuration(now.Sub(eventTime(ev))), ev.Type, ev.Reason, obj, msg, count)
}
