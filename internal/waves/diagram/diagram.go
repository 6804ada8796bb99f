// Package diagram draws the dependency graph of a wave plan: every node with its wave and the
// Kustomization that applies it, dependency and anchor edges, extra units, non-gating units and
// nodes that are computed but not placed. It writes Graphviz dot, Mermaid and JSON.
package diagram

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strings"

	"github.com/siteops/siteops/internal/waves/blast"
	"github.com/siteops/siteops/internal/waves/catalog"
	"github.com/siteops/siteops/internal/waves/graph"
	"github.com/siteops/siteops/internal/waves/plan"
)

// EdgeKind says why one node waits for another.
type EdgeKind string

const (
	// Dependency is a declared `dependencies:` edge (or a service's own database).
	Dependency EdgeKind = "dependency"
	// Anchor places an extra unit relative to its anchor node.
	Anchor EdgeKind = "anchor"
)

// Node is one node of the graph.
type Node struct {
	Name string     `json:"name"`
	Wave int        `json:"wave"`
	Kind graph.Kind `json:"kind"`
	// Kustomization applies the node's files; empty when the node is not placed.
	Kustomization string `json:"kustomization,omitempty"`
	// Placed is false for a node computed from the catalog without committed files.
	Placed bool `json:"placed"`
	// Above marks an extra unit placed one wave above its anchor.
	Above bool `json:"above,omitempty"`
	// NonGating marks an extra unit with its own Kustomization that nothing waits for.
	NonGating bool `json:"nonGating,omitempty"`
	// Blast counts the placed nodes a failure of this node blocks: under the wave chain and
	// under its exact dependents (see package blast).
	Blast *Blast `json:"blast,omitempty"`
}

// Blast is a node's blast radius as numbers.
type Blast struct {
	Chain int `json:"chain"`
	Exact int `json:"exact"`
}

// Edge says that From must be healthy before To (To depends on From).
type Edge struct {
	From string   `json:"from"`
	To   string   `json:"to"`
	Kind EdgeKind `json:"kind"`
}

// Graph is the drawable graph.
type Graph struct {
	// Waves is the number of waves (the highest wave plus one).
	Waves int    `json:"waves"`
	Nodes []Node `json:"nodes"`
	Edges []Edge `json:"edges"`
}

// New builds the graph of a catalog, its waves and the plan of its committed files.
func New(c *catalog.Catalog, w *graph.Waves, p *plan.Plan) *Graph {
	units := map[string]catalog.ExtraUnit{}
	for _, u := range c.Units {
		units[u.Name] = u
	}
	radii := blast.All(w, blast.OptionsFor(c, w, p))
	g := &Graph{}
	for _, name := range w.Nodes() {
		wave, _ := w.Wave(name)
		r := radii[name]
		n := Node{Name: name, Wave: wave, Kind: w.Kind(name), Blast: &Blast{Chain: len(r.Chain), Exact: len(r.Exact)}}
		for _, f := range plan.FilesOf(c, w, name) {
			if grp, ok := p.GroupOf(f); ok {
				n.Placed, n.Kustomization = true, grp.Name
				break
			}
		}
		kind := Dependency
		if u, ok := units[name]; ok {
			n.Above, n.NonGating, kind = u.Above, u.NonGating, Anchor
		}
		for _, d := range w.DependsOn(name) {
			g.Edges = append(g.Edges, Edge{From: d, To: name, Kind: kind})
		}
		g.Waves = max(g.Waves, wave+1)
		g.Nodes = append(g.Nodes, n)
	}
	slices.SortFunc(g.Edges, func(a, b Edge) int {
		return cmp.Or(strings.Compare(a.From, b.From), strings.Compare(a.To, b.To))
	})
	return g
}

// byWave returns the nodes of each wave, in the order of g.Nodes.
func (g *Graph) byWave() [][]Node {
	out := make([][]Node, g.Waves)
	for _, n := range g.Nodes {
		out[n.Wave] = append(out[n.Wave], n)
	}
	return out
}

// JSON writes the graph as indented JSON.
func (g *Graph) JSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(g)
}

// note is the second label line of a node: what is special about it.
func note(n Node) string {
	var parts []string
	switch {
	case !n.Placed:
		parts = append(parts, "not placed")
	case n.NonGating:
		parts = append(parts, "non-gating")
	}
	if n.Blast != nil {
		parts = append(parts, fmt.Sprintf("blast %d/%d", n.Blast.Chain, n.Blast.Exact))
	}
	return strings.Join(parts, ", ")
}

// tooltip is what hovering a node in the rendered SVG says: its blast radius in words.
func tooltip(n Node) string {
	if n.Blast == nil {
		return ""
	}
	return fmt.Sprintf("%s, wave %d: a failure blocks %d nodes behind it in the wave chain, %d that depend on it", n.Name, n.Wave, n.Blast.Chain, n.Blast.Exact)
}

func edgeLabel(e Edge, nodes map[string]Node) string {
	if e.Kind != Anchor {
		return ""
	}
	if nodes[e.To].Above {
		return "anchor, above"
	}
	return "anchor"
}

func (g *Graph) index() map[string]Node {
	m := make(map[string]Node, len(g.Nodes))
	for _, n := range g.Nodes {
		m[n.Name] = n
	}
	return m
}

// Dot writes the graph in Graphviz's dot language: one cluster per wave, top to bottom in the
// order Flux reconciles them; an arrow points from what must be healthy first to what waits.
func (g *Graph) Dot(w io.Writer) error {
	b := &strings.Builder{}
	b.WriteString("digraph waves {\n  rankdir=TB;\n  compound=true;\n")
	b.WriteString("  node [shape=box, style=\"rounded,filled\", fillcolor=white, fontname=\"Helvetica\"];\n")
	b.WriteString("  edge [fontname=\"Helvetica\", fontsize=10];\n")
	for wave, nodes := range g.byWave() {
		fmt.Fprintf(b, "  subgraph cluster_wave_%d {\n    label=%q;\n    style=rounded;\n", wave, waveLabel(wave, nodes))
		for _, n := range nodes {
			label := n.Name
			if s := note(n); s != "" {
				label += "\n" + s
			}
			attrs := []string{"label=" + quote(label)}
			if t := tooltip(n); t != "" {
				attrs = append(attrs, "tooltip="+quote(t))
			}
			switch n.Kind {
			case graph.KindDatabase:
				attrs = append(attrs, "shape=cylinder")
			case graph.KindUnit:
				attrs = append(attrs, "shape=component")
			}
			switch {
			case !n.Placed:
				attrs = append(attrs, `style="rounded,dashed"`, "fontcolor=gray40", "color=gray40")
			case n.NonGating:
				attrs = append(attrs, `style="rounded,filled,dotted"`, "fillcolor=gray92")
			}
			fmt.Fprintf(b, "    %s [%s];\n", quote(n.Name), strings.Join(attrs, ", "))
		}
		b.WriteString("  }\n")
	}
	nodes := g.index()
	for _, e := range g.Edges {
		var attrs []string
		if l := edgeLabel(e, nodes); l != "" {
			attrs = append(attrs, "style=dashed", "label="+quote(l))
		}
		if !nodes[e.To].Placed || !nodes[e.From].Placed {
			attrs = append(attrs, "color=gray60")
		}
		suffix := ""
		if len(attrs) > 0 {
			suffix = " [" + strings.Join(attrs, ", ") + "]"
		}
		fmt.Fprintf(b, "  %s -> %s%s;\n", quote(e.From), quote(e.To), suffix)
	}
	b.WriteString("}\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// waveLabel names a wave and the Kustomization(s) that apply it.
func waveLabel(wave int, nodes []Node) string {
	var ks []string
	for _, n := range nodes {
		if n.Placed && !n.NonGating && !slices.Contains(ks, n.Kustomization) {
			ks = append(ks, n.Kustomization)
		}
	}
	l := fmt.Sprintf("wave %d", wave)
	if len(ks) == 1 {
		l += " · " + ks[0]
	}
	return l
}

// quote makes a dot ID or label string: node names are DNS labels, so only the label's newline
// needs care.
func quote(s string) string {
	return `"` + strings.ReplaceAll(strings.ReplaceAll(s, `"`, `\"`), "\n", `\n`) + `"`
}

// Mermaid writes a Mermaid flowchart, ready to paste into a pull request inside a ```mermaid
// fence.
func (g *Graph) Mermaid(w io.Writer) error {
	b := &strings.Builder{}
	b.WriteString("flowchart TB\n")
	for wave, nodes := range g.byWave() {
		fmt.Fprintf(b, "  subgraph wave%d[\"%s\"]\n", wave, waveLabel(wave, nodes))
		for _, n := range nodes {
			label := n.Name
			if s := note(n); s != "" {
				label += "<br/><i>" + s + "</i>"
			}
			open, close := "[", "]"
			switch n.Kind {
			case graph.KindDatabase:
				open, close = "[(", ")]"
			case graph.KindUnit:
				open, close = "{{", "}}"
			}
			class := ""
			switch {
			case !n.Placed:
				class = ":::notPlaced"
			case n.NonGating:
				class = ":::nonGating"
			}
			fmt.Fprintf(b, "    %s%s\"%s\"%s%s\n", mermaidID(n.Name), open, label, close, class)
		}
		b.WriteString("  end\n")
	}
	nodes := g.index()
	for _, e := range g.Edges {
		arrow := "-->"
		if l := edgeLabel(e, nodes); l != "" {
			arrow = "-.->|" + l + "|"
		}
		fmt.Fprintf(b, "  %s %s %s\n", mermaidID(e.From), arrow, mermaidID(e.To))
	}
	b.WriteString("  classDef notPlaced stroke-dasharray: 5 5,color:#666\n")
	b.WriteString("  classDef nonGating fill:#eee,stroke-dasharray: 2 2\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// mermaidID turns a node name into a Mermaid ID. Node names are DNS labels (no underscore), so
// the mapping cannot collide; the prefix keeps words such as "end" from being read as keywords.
func mermaidID(name string) string { return "n_" + strings.ReplaceAll(name, "-", "_") }

// SVG renders the graph with Graphviz's dot (dotPath, or "dot" on the PATH when empty) and
// returns the SVG document.
func (g *Graph) SVG(ctx context.Context, dotPath string) ([]byte, error) {
	if dotPath == "" {
		dotPath = "dot"
	}
	var src, out, stderr bytes.Buffer
	if err := g.Dot(&src); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, dotPath, "-Tsvg")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = &src, &out, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("render the wave graph with Graphviz (%s): %w: %s", dotPath, err, strings.TrimSpace(stderr.String()))
	}
	return out.Bytes(), nil
}
