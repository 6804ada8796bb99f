// Package blast computes what a failing node blocks: under the wave chain, where a wave that is
// not ready holds back every higher wave, and under exact per-service dependencies, where only
// the nodes that really depend on it wait.
package blast

import (
	"fmt"
	"slices"

	"github.com/siteops/siteops/internal/waves/catalog"
	"github.com/siteops/siteops/internal/waves/graph"
	"github.com/siteops/siteops/internal/waves/plan"
)

// Unit describes an extra unit the computation needs beyond the graph.
type Unit struct {
	// Above places the unit one wave above its anchor: it waits for the anchor itself.
	Above bool
	// NonGating gives the unit its own Kustomization that no wave waits for.
	NonGating bool
}

// Options tune the computation.
type Options struct {
	// Units are the extra units by name.
	Units map[string]Unit
	// Count says which nodes a radius lists (the placed ones: only they run on a cluster); nil
	// lists every node.
	Count func(node string) bool
}

// Radius is what a failing node blocks. Both lists are sorted by wave, then name.
type Radius struct {
	Node string `json:"node"`
	Wave int    `json:"wave"`
	// Chain are the nodes held back under the wave layout: every gating node in a higher wave,
	// and the non-gating units whose Kustomization waits for this node's wave or a higher one.
	Chain []string `json:"chain"`
	// Exact are the nodes held back under per-service Kustomizations: those that depend on the
	// node directly or through others.
	Exact []string `json:"exact"`
}

// Of computes the radius of one node.
func Of(w *graph.Waves, node string, o Options) (Radius, error) {
	if !w.Has(node) {
		return Radius{}, fmt.Errorf("%q is not a node of the catalog: run `siteops waves print` for the node names", node)
	}
	return newCalc(w, o).radius(node), nil
}

// All computes the radius of every node, keyed by name.
func All(w *graph.Waves, o Options) map[string]Radius {
	c := newCalc(w, o)
	out := make(map[string]Radius, w.Len())
	w.Each(func(name string, _ int, _ graph.Kind) { out[name] = c.radius(name) })
	return out
}

type calc struct {
	w     *graph.Waves
	o     Options
	nodes []string // by wave, then name
	// waitsFor maps a node to the nodes that wait for it under per-service Kustomizations.
	waitsFor map[string][]string
}

func newCalc(w *graph.Waves, o Options) *calc {
	c := &calc{w: w, o: o, nodes: w.Nodes(), waitsFor: map[string][]string{}}
	for _, n := range c.nodes {
		for _, d := range w.ExactDependencies(n) {
			c.waitsFor[d] = append(c.waitsFor[d], n)
		}
	}
	return c
}

func (c *calc) count(n string) bool { return c.o.Count == nil || c.o.Count(n) }

func (c *calc) radius(node string) Radius {
	wave, _ := c.w.Wave(node)
	r := Radius{Node: node, Wave: wave, Chain: []string{}, Exact: []string{}}
	if !c.o.Units[node].NonGating {
		for _, n := range c.nodes {
			if n == node || !c.count(n) {
				continue
			}
			nw, _ := c.w.Wave(n)
			u, isUnit := c.o.Units[n]
			switch {
			case isUnit && u.NonGating:
				// Its Kustomization waits for the highest wave below it when placed above its
				// anchor, else for its anchor's wave (plan.Make): every wave up to that one gates it.
				gate := nw
				if u.Above {
					gate--
				}
				if wave <= gate {
					r.Chain = append(r.Chain, n)
				}
			case nw > wave:
				r.Chain = append(r.Chain, n)
			}
		}
	}
	seen := map[string]bool{node: true}
	queue := []string{node}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, n := range c.waitsFor[cur] {
			if !seen[n] {
				seen[n] = true
				queue = append(queue, n)
			}
		}
	}
	for _, n := range c.nodes {
		if n != node && seen[n] && c.count(n) {
			r.Exact = append(r.Exact, n)
		}
	}
	return r
}

// Sorted returns the radii ordered by wave, then name.
func Sorted(w *graph.Waves, all map[string]Radius) []Radius {
	out := make([]Radius, 0, len(all))
	for _, n := range w.Nodes() {
		out = append(out, all[n])
	}
	return slices.Clip(out)
}

// OptionsFor takes the extra units from the catalog and counts the placed nodes (those with
// committed files), or every node when nothing is placed yet (a bare catalog).
func OptionsFor(c *catalog.Catalog, w *graph.Waves, p *plan.Plan) Options {
	o := Options{Units: make(map[string]Unit, len(c.Units))}
	for _, u := range c.Units {
		o.Units[u.Name] = Unit{Above: u.Above, NonGating: u.NonGating}
	}
	if p == nil || len(p.Placement) == 0 {
		return o
	}
	placed := map[string]bool{}
	w.Each(func(name string, _ int, _ graph.Kind) {
		for _, f := range plan.FilesOf(c, w, name) {
			if _, ok := p.Placement[f]; ok {
				placed[name] = true
			}
		}
	})
	o.Count = func(n string) bool { return placed[n] }
	return o
}
