// Package plan maps committed app files onto computed waves by the naming convention
// `<svc>.yaml`, `<svc>-bootstrap-secret.sops.yaml`, `<svc>-db.yaml`, `<svc>-db-app.sops.yaml`,
// plus the files of extra units, and names the Flux Kustomization that owns each wave.
package plan

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/siteops/siteops/internal/waves/catalog"
	"github.com/siteops/siteops/internal/waves/graph"
)

// Granularity says what one Flux Kustomization applies.
type Granularity string

const (
	// ByWave applies a whole wave per Kustomization; each wave waits for the one below.
	ByWave Granularity = "wave"
	// ByService applies one node per Kustomization, waiting for exactly what the node needs.
	ByService Granularity = "service"
)

// Options name the Kustomizations.
type Options struct {
	// Prefix of the Kustomization names: "<prefix>-wave-<N>", or "<prefix>-<node>" by service
	// ("apps").
	Prefix string
	// Root is the Kustomization the first wave (or a node without dependencies) depends on
	// ("platform-config").
	Root string
	// Granularity is ByWave (the default) or ByService.
	Granularity Granularity
}

// DefaultOptions are the seed's names.
var DefaultOptions = Options{Prefix: "apps", Root: "platform-config"}

// Group is the set of files one Flux Kustomization applies.
type Group struct {
	// Name of the Kustomization, e.g. "apps-wave-1".
	Name string `json:"name"`
	// Wave number.
	Wave int `json:"wave"`
	// Dir is the folder under apps/, e.g. "wave-1".
	Dir string `json:"dir"`
	// Files are the file names, sorted.
	Files []string `json:"files"`
	// DependsOn are the Kustomizations this one waits for: the wave below, or by service the
	// Kustomizations of the node's exact dependencies.
	DependsOn []string `json:"dependsOn"`
	// NonGating marks a unit's own Kustomization that no wave depends on.
	NonGating bool `json:"nonGating,omitempty"`
	// Unit names the non-gating unit.
	Unit string `json:"unit,omitempty"`
	// Node names the one node a per-service Kustomization applies.
	Node string `json:"node,omitempty"`
}

// Node is a node with its wave.
type Node struct {
	Name string `json:"name"`
	Wave int    `json:"wave"`
}

// Plan is the placement of every committed app file.
type Plan struct {
	// Granularity is the layout planned.
	Granularity Granularity
	// Groups are the gating waves in order, then the non-gating units; by service, one group per
	// placed node, by wave then name.
	Groups []Group
	// Placement maps a file name to the index of its group in Groups.
	Placement map[string]int
	// NotPlaced are nodes that were computed but have no committed files.
	NotPlaced []Node
	// Unmatched are committed files no node claims.
	Unmatched []string
}

// ConflictError reports a file name claimed by two nodes.
type ConflictError struct{ File, First, Second string }

func (e *ConflictError) Error() string {
	return fmt.Sprintf("file %s is claimed by both %s and %s: rename the extra unit's file or the service", e.File, e.First, e.Second)
}

// FilesOf returns the file names that belong to a node by the naming convention.
func FilesOf(c *catalog.Catalog, w *graph.Waves, node string) []string {
	return filesOf(c, node, w.Kind(node))
}

func filesOf(c *catalog.Catalog, node string, kind graph.Kind) []string {
	switch kind {
	case graph.KindService:
		return []string{node + ".yaml", node + "-bootstrap-secret.sops.yaml"}
	case graph.KindDatabase:
		return []string{node + ".yaml", node + "-app.sops.yaml"}
	case graph.KindUnit:
		for _, u := range c.Units {
			if u.Name == node {
				return u.Files
			}
		}
	}
	return nil
}

// Make places the present files (file names under apps/) into waves.
func Make(c *catalog.Catalog, w *graph.Waves, present map[string]string, o Options) (*Plan, error) {
	if o.Prefix == "" {
		o.Prefix, o.Root = DefaultOptions.Prefix, DefaultOptions.Root
	}
	nonGating := map[string]bool{}
	for _, u := range c.Units {
		nonGating[u.Name] = u.NonGating
	}
	owner := make(map[string]string, len(present))
	gating := map[int][]string{}
	type ng struct {
		unit  string
		wave  int
		files []string
	}
	var ngs []ng
	if o.Granularity == "" {
		o.Granularity = ByWave
	}
	p := &Plan{Placement: make(map[string]int, len(present)), Granularity: o.Granularity}
	var conflict error
	w.Each(func(node string, wave int, kind graph.Kind) {
		if conflict != nil {
			return
		}
		var files []string
		for _, f := range filesOf(c, node, kind) {
			if _, ok := present[f]; !ok {
				continue
			}
			if prev, ok := owner[f]; ok {
				first, second := prev, node
				if second < first {
					first, second = second, first
				}
				conflict = &ConflictError{File: f, First: first, Second: second}
				return
			}
			owner[f] = node
			files = append(files, f)
		}
		switch {
		case len(files) == 0:
			p.NotPlaced = append(p.NotPlaced, Node{Name: node, Wave: wave})
		case nonGating[node]:
			ngs = append(ngs, ng{unit: node, wave: wave, files: files})
		default:
			gating[wave] = append(gating[wave], files...)
		}
	})
	if conflict != nil {
		return nil, conflict
	}
	sort.Slice(p.NotPlaced, func(a, b int) bool {
		if p.NotPlaced[a].Wave != p.NotPlaced[b].Wave {
			return p.NotPlaced[a].Wave < p.NotPlaced[b].Wave
		}
		return p.NotPlaced[a].Name < p.NotPlaced[b].Name
	})
	if o.Granularity == ByService {
		p.byService(w, owner, o)
		p.finish(owner, present)
		return p, nil
	}
	sort.Slice(ngs, func(a, b int) bool { return ngs[a].unit < ngs[b].unit })
	waves := make([]int, 0, len(gating))
	for wv := range gating {
		waves = append(waves, wv)
	}
	sort.Ints(waves)
	byWave := map[int]string{}
	prev := o.Root
	for _, wv := range waves {
		files := gating[wv]
		sort.Strings(files)
		g := Group{Name: o.Prefix + "-" + Dir(wv), Wave: wv, Dir: Dir(wv), Files: files, DependsOn: []string{prev}}
		p.Groups = append(p.Groups, g)
		byWave[wv] = g.Name
		prev = g.Name
	}
	for _, n := range ngs {
		sort.Strings(n.files)
		// The unit waits for the highest gating wave below its own (the wave that holds what it
		// needs); nothing waits for the unit.
		dep := o.Root
		for _, wv := range waves {
			if wv < n.wave || (wv == n.wave && !aboveAnchor(c, n.unit)) {
				dep = byWave[wv]
			}
		}
		d := Dir(n.wave) + "-" + n.unit
		p.Groups = append(p.Groups, Group{Name: o.Prefix + "-" + d, Wave: n.wave, Dir: d, Files: n.files, DependsOn: []string{dep}, NonGating: true, Unit: n.unit})
	}
	p.finish(owner, present)
	return p, nil
}

// finish indexes the groups' files and lists the files nothing claims.
func (p *Plan) finish(owner map[string]string, present map[string]string) {
	for i, g := range p.Groups {
		for _, f := range g.Files {
			p.Placement[f] = i
		}
	}
	for f := range present {
		if _, ok := owner[f]; !ok {
			p.Unmatched = append(p.Unmatched, f)
		}
	}
	sort.Strings(p.Unmatched)
}

// byService gives every placed node its own group, in folder <node>, waiting for the groups of
// its exact dependencies. A dependency without files is looked through to what it needs in turn.
func (p *Plan) byService(w *graph.Waves, owner map[string]string, o Options) {
	files := map[string][]string{}
	for f, n := range owner {
		files[n] = append(files[n], f)
	}
	var needs func(node string, seen map[string]bool) []string
	needs = func(node string, seen map[string]bool) []string {
		var out []string
		for _, d := range w.ExactDependencies(node) {
			switch {
			case seen[d]:
			case len(files[d]) > 0:
				seen[d] = true
				out = append(out, o.Prefix+"-"+d)
			default:
				seen[d] = true
				out = append(out, needs(d, seen)...)
			}
		}
		return out
	}
	for _, n := range w.Nodes() {
		if len(files[n]) == 0 {
			continue
		}
		sort.Strings(files[n])
		deps := needs(n, map[string]bool{})
		sort.Strings(deps)
		if len(deps) == 0 {
			deps = []string{o.Root}
		}
		wave, _ := w.Wave(n)
		p.Groups = append(p.Groups, Group{Name: o.Prefix + "-" + n, Wave: wave, Dir: n, Files: files[n], DependsOn: deps, Node: n})
	}
}

func aboveAnchor(c *catalog.Catalog, unit string) bool {
	for _, u := range c.Units {
		if u.Name == unit {
			return u.Above
		}
	}
	return false
}

// Dir is the folder name of a wave.
func Dir(wave int) string { return "wave-" + strconv.Itoa(wave) }

// Waves returns wave → files for the gating waves.
func (p *Plan) Waves() map[int][]string {
	out := map[int][]string{}
	for _, g := range p.Groups {
		if !g.NonGating {
			out[g.Wave] = append(out[g.Wave], g.Files...)
		}
	}
	for _, files := range out {
		sort.Strings(files)
	}
	return out
}

// GroupOf returns the group a file is placed in.
func (p *Plan) GroupOf(file string) (Group, bool) {
	i, ok := p.Placement[file]
	if !ok {
		return Group{}, false
	}
	return p.Groups[i], true
}
