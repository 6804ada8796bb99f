// Package graph computes delivery waves from a dependency graph: a node's wave is the length of
// the longest dependency path below it, so every node lands strictly above everything it needs.
package graph

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Kind says where a node comes from.
type Kind string

const (
	// KindService is a node with its own service definition.
	KindService Kind = "service"
	// KindDatabase is a co-located database node (`<svc>-db`) without its own definition: a leaf.
	KindDatabase Kind = "database"
	// KindUnit is an extra unit anchored to another node instead of declaring dependencies.
	KindUnit Kind = "unit"
)

// Service is a node that declares the nodes it depends on.
type Service struct {
	// Name is the node's name.
	Name string
	// DependsOn lists the nodes that must be healthy first.
	DependsOn []string
}

// Unit is a node without dependency edges of its own, placed relative to an anchor node.
type Unit struct {
	// Name is the unit's name.
	Name string
	// Anchor is the node the unit is placed by.
	Anchor string
	// Above places the unit one wave above its anchor instead of in the anchor's wave.
	Above bool
}

// Input is everything the wave computation needs.
type Input struct {
	Services []Service
	Units    []Unit
}

// CycleError reports a dependency cycle; Cycle starts and ends with the same node.
type CycleError struct{ Cycle []string }

func (e *CycleError) Error() string {
	return fmt.Sprintf("dependency cycle: %s (break one of these edges)", strings.Join(e.Cycle, " → "))
}

// UnknownDependencyError reports an edge to a node that is neither defined nor a `<svc>-db` leaf.
type UnknownDependencyError struct{ From, To string }

func (e *UnknownDependencyError) Error() string {
	return fmt.Sprintf("%s depends on %q, which has no service definition (only a `<svc>-db` database node may be undefined): add catalog/%s.yaml or fix the dependency", e.From, e.To, e.To)
}

// MissingAnchorError reports an extra unit whose anchor is not a node.
type MissingAnchorError struct{ Unit, Anchor string }

func (e *MissingAnchorError) Error() string {
	return fmt.Sprintf("extra unit %s is anchored to %q, which is not a known node: fix its anchor", e.Unit, e.Anchor)
}

// DuplicateNodeError reports two nodes with the same name.
type DuplicateNodeError struct{ Name string }

func (e *DuplicateNodeError) Error() string {
	return fmt.Sprintf("node %q is defined twice (services and extra units share one name space)", e.Name)
}

// Waves is the computed wave of every node.
type Waves struct {
	names   []string
	index   map[string]int32
	kind    []Kind
	wave    []int32
	decider []int32 // the dependency (or anchor) that set the wave; -1 for a leaf
	deps    [][]int32
	above   []bool
}

// Compute assigns every node its wave. Nodes named by a dependency but not defined are database
// leaves when their name ends in "-db"; anything else undefined is an error.
func Compute(in Input) (*Waves, error) {
	n := len(in.Services) + len(in.Units)
	c := n + n/4 // room for database leaves
	w := &Waves{
		index: make(map[string]int32, c),
		names: make([]string, 0, c),
		kind:  make([]Kind, 0, c),
		deps:  make([][]int32, 0, c),
		above: make([]bool, 0, c),
	}
	add := func(name string, k Kind) (int32, error) {
		if _, ok := w.index[name]; ok {
			return 0, &DuplicateNodeError{Name: name}
		}
		i := int32(len(w.names))
		w.index[name] = i
		w.names = append(w.names, name)
		w.kind = append(w.kind, k)
		w.deps = append(w.deps, nil)
		w.above = append(w.above, false)
		return i, nil
	}
	for _, s := range in.Services {
		if _, err := add(s.Name, KindService); err != nil {
			return nil, err
		}
	}
	for _, s := range in.Services {
		from := w.index[s.Name]
		deps := make([]int32, 0, len(s.DependsOn))
		for _, d := range s.DependsOn {
			j, ok := w.index[d]
			if !ok {
				if !strings.HasSuffix(d, "-db") {
					return nil, &UnknownDependencyError{From: s.Name, To: d}
				}
				j, _ = add(d, KindDatabase)
			}
			if w.kind[j] == KindUnit {
				return nil, &UnknownDependencyError{From: s.Name, To: d}
			}
			deps = append(deps, j)
		}
		w.deps[from] = deps
	}
	for _, u := range in.Units {
		if _, err := add(u.Name, KindUnit); err != nil {
			return nil, err
		}
	}
	for _, u := range in.Units {
		i := w.index[u.Name]
		a, ok := w.index[u.Anchor]
		if !ok {
			return nil, &MissingAnchorError{Unit: u.Name, Anchor: u.Anchor}
		}
		w.deps[i] = []int32{a}
		w.above[i] = u.Above
	}
	if err := w.solve(); err != nil {
		return nil, err
	}
	return w, nil
}

// solve runs an iterative depth-first search so deep chains do not exhaust the stack.
func (w *Waves) solve() error {
	const (
		white = iota
		grey
		black
	)
	n := len(w.names)
	w.wave = make([]int32, n)
	w.decider = make([]int32, n)
	color := make([]uint8, n)
	stack := make([]frame, 0, 64)
	for root := 0; root < n; root++ {
		if color[root] != white {
			continue
		}
		stack = append(stack[:0], frame{node: int32(root)})
		color[root] = grey
		for len(stack) > 0 {
			top := &stack[len(stack)-1]
			deps := w.deps[top.node]
			if int(top.next) < len(deps) {
				d := deps[top.next]
				top.next++
				switch color[d] {
				case white:
					color[d] = grey
					stack = append(stack, frame{node: d})
				case grey:
					return w.cycle(stack, d)
				}
				continue
			}
			w.settle(top.node)
			color[top.node] = black
			stack = stack[:len(stack)-1]
		}
	}
	return nil
}

// settle sets a node's wave from its already-settled dependencies.
func (w *Waves) settle(i int32) {
	wave, decider := int32(0), int32(-1)
	if w.kind[i] == KindUnit {
		a := w.deps[i][0]
		wave, decider = w.wave[a], a
		if w.above[i] {
			wave++
		}
	} else {
		for _, d := range w.deps[i] {
			if c := w.wave[d] + 1; c > wave || (c == wave && w.names[d] < w.names[decider]) {
				wave, decider = c, d
			}
		}
	}
	w.wave[i], w.decider[i] = wave, decider
}

type frame struct{ node, next int32 }

func (w *Waves) cycle(stack []frame, back int32) error {
	start := 0
	for k, f := range stack {
		if f.node == back {
			start = k
			break
		}
	}
	c := make([]string, 0, len(stack)-start+1)
	for _, f := range stack[start:] {
		c = append(c, w.names[f.node])
	}
	return &CycleError{Cycle: append(c, w.names[back])}
}

// Has reports whether name is a node.
func (w *Waves) Has(name string) bool { _, ok := w.index[name]; return ok }

// Wave returns a node's wave and whether the node exists.
func (w *Waves) Wave(name string) (int, bool) {
	i, ok := w.index[name]
	if !ok {
		return 0, false
	}
	return int(w.wave[i]), true
}

// Kind returns a node's kind ("" for an unknown node).
func (w *Waves) Kind(name string) Kind {
	if i, ok := w.index[name]; ok {
		return w.kind[i]
	}
	return ""
}

// Nodes returns every node ordered by wave, then name.
func (w *Waves) Nodes() []string {
	idx := make([]int32, len(w.names))
	for i := range idx {
		idx[i] = int32(i)
	}
	slices.SortFunc(idx, func(a, b int32) int {
		if c := cmp.Compare(w.wave[a], w.wave[b]); c != 0 {
			return c
		}
		return strings.Compare(w.names[a], w.names[b])
	})
	out := make([]string, len(idx))
	for k, i := range idx {
		out[k] = w.names[i]
	}
	return out
}

// Each calls fn for every node in definition order (cheaper than Nodes when order is not needed).
func (w *Waves) Each(fn func(name string, wave int, kind Kind)) {
	for i, n := range w.names {
		fn(n, int(w.wave[i]), w.kind[i])
	}
}

// Len is the number of nodes.
func (w *Waves) Len() int { return len(w.names) }

// DependsOn returns a node's direct dependencies (for a unit: its anchor).
func (w *Waves) DependsOn(name string) []string {
	i, ok := w.index[name]
	if !ok {
		return nil
	}
	out := make([]string, len(w.deps[i]))
	for k, d := range w.deps[i] {
		out[k] = w.names[d]
	}
	return out
}

// ExactDependencies returns the nodes a node's own Kustomization waits for when every node has
// one (per-service granularity): a service's dependencies; for an extra unit placed above its
// anchor, the anchor; for one in its anchor's wave, what the anchor waits for (the two run side by
// side, as in the wave layout).
func (w *Waves) ExactDependencies(name string) []string {
	i, ok := w.index[name]
	for ok && w.kind[i] == KindUnit && !w.above[i] {
		i = w.deps[i][0]
	}
	if !ok || len(w.deps[i]) == 0 {
		return nil
	}
	out := make([]string, len(w.deps[i]))
	for k, d := range w.deps[i] {
		out[k] = w.names[d]
	}
	return out
}

// Path returns the chain of nodes that decided name's wave: name, the dependency with the highest
// wave, its deciding dependency, and so on down to a leaf. Its length is the wave plus one for
// services (units anchored in the same wave add a step without adding a wave).
func (w *Waves) Path(name string) []string {
	i, ok := w.index[name]
	if !ok {
		return nil
	}
	var out []string
	for ; i >= 0; i = w.decider[i] {
		out = append(out, w.names[i])
	}
	return out
}

// Reason explains a node's wave in words, e.g. "→ qbittorrent (w0), jackett (w0)".
func (w *Waves) Reason(name string) string {
	i, ok := w.index[name]
	if !ok {
		return ""
	}
	switch {
	case w.kind[i] == KindUnit:
		a := w.deps[i][0]
		if w.above[i] {
			return fmt.Sprintf("extra unit: anchor %s (w%d), above → one wave up", w.names[a], w.wave[a])
		}
		return fmt.Sprintf("extra unit: anchor %s (w%d), same wave", w.names[a], w.wave[a])
	case len(w.deps[i]) == 0 && w.kind[i] == KindDatabase:
		return "co-located database leaf"
	case len(w.deps[i]) == 0:
		return "no dependencies (leaf)"
	}
	parts := make([]string, len(w.deps[i]))
	for k, d := range w.deps[i] {
		parts[k] = fmt.Sprintf("%s (w%d)", w.names[d], w.wave[d])
	}
	return "→ " + strings.Join(parts, ", ")
}
