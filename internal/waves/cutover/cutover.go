// Package cutover checks that moving app resources from one Flux Kustomization to another (the
// split of `apps` into waves, or a service changing wave) cannot garbage-collect them, and prints
// the safe sequence when it could.
package cutover

import (
	"fmt"
	"io"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	kustv1 "github.com/fluxcd/kustomize-controller/api/v1"
	"sigs.k8s.io/yaml"

	"github.com/siteops/siteops/internal/waves/repo"
)

// PruneAnnotation set to PruneDisabled on an object makes Flux never delete it.
const (
	PruneAnnotation = "kustomize.toolkit.fluxcd.io/prune"
	PruneDisabled   = "disabled"
)

// HazardKind names a cut-over hazard.
type HazardKind string

const (
	// PruneRemoval is the removal of a Kustomization that still has prune: true: its finalizer
	// deletes every resource it owns, including those another Kustomization is about to adopt.
	PruneRemoval HazardKind = "prune-removal"
	// MoveUp is a resource moving to a higher wave: its old wave reconciles first and prunes it
	// before the new wave adopts it.
	MoveUp HazardKind = "move-up"
)

// Resource is an app resource and where it goes.
type Resource struct {
	// ID is "<kind>.<group> <namespace>/<name>".
	ID, Kind string
	// From and To are the owning Kustomizations at the base ref and in the working tree.
	From, To string
	// Protected means the live object carries kustomize.toolkit.fluxcd.io/prune: disabled.
	Protected bool
}

// Stateful reports kinds whose deletion loses data.
func (r Resource) Stateful() bool {
	switch r.Kind {
	case "Cluster.postgresql.cnpg.io", "PersistentVolumeClaim", "StatefulSet.apps":
		return true
	}
	return false
}

// Hazard is a move Flux would turn into a delete.
type Hazard struct {
	Kind HazardKind
	// Kustomization is the one that would prune.
	Kustomization string
	// Resources are those at risk; Mitigated when all of them are protected.
	Resources []Resource
	Mitigated bool
}

// Report is the result of Check.
type Report struct {
	// Base is the ref compared against; Where the cluster folder.
	Base, Where string
	// Moving are resources whose owner changes.
	Moving  []Resource
	Hazards []Hazard
	// Removed are Kustomizations that exist at the base ref but not in the working tree.
	Removed []string
}

// Unmitigated reports whether any hazard is left unmitigated.
func (r *Report) Unmitigated() bool {
	for _, h := range r.Hazards {
		if !h.Mitigated {
			return true
		}
	}
	return false
}

type owner struct {
	name  string
	wave  int // -1 when not a wave
	prune bool
}

type tree struct {
	ks    map[string]owner
	owned map[string]Resource // id → resource (From set to its owner)
}

// Check compares the placement at before (the live state) with after (the change to merge), for
// every environment under clusters/ (or clusters/base when there is none): each may patch prune.
func Check(before, after *repo.Repo) ([]*Report, error) {
	dirs, err := clusterDirs(after)
	if err != nil {
		return nil, err
	}
	var out []*Report
	for _, where := range dirs {
		r, err := CheckIn(before, after, where)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// CheckIn compares the placement of one cluster folder (e.g. "clusters/dev").
func CheckIn(before, after *repo.Repo, where string) (*Report, error) {
	b, err := load(before, where)
	if err != nil {
		return nil, err
	}
	a, err := load(after, where)
	if err != nil {
		return nil, err
	}
	rep := &Report{Base: before.Label, Where: where}
	for name := range b.ks {
		if _, ok := a.ks[name]; !ok {
			rep.Removed = append(rep.Removed, name)
		}
	}
	sort.Strings(rep.Removed)
	ids := make([]string, 0, len(b.owned))
	for id := range b.owned {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	byKs := map[HazardKind]map[string][]Resource{PruneRemoval: {}, MoveUp: {}}
	for _, id := range ids {
		old := b.owned[id]
		now, ok := a.owned[id]
		if !ok || now.From == old.From {
			continue
		}
		res := old
		res.To = now.From
		rep.Moving = append(rep.Moving, res)
		from := b.ks[old.From]
		if !from.prune {
			continue // the old owner releases without garbage collection
		}
		if _, still := a.ks[old.From]; !still {
			byKs[PruneRemoval][old.From] = append(byKs[PruneRemoval][old.From], res)
			continue
		}
		// The old owner stays and prunes the object when it leaves its build. Only a move to a
		// strictly lower wave is safe: the new owner reconciles first and relabels the object, and
		// Flux does not delete objects another Kustomization has taken over.
		to := a.ks[now.From]
		if from.wave < 0 || to.wave < 0 || to.wave >= from.wave {
			byKs[MoveUp][old.From] = append(byKs[MoveUp][old.From], res)
		}
	}
	for _, kind := range []HazardKind{PruneRemoval, MoveUp} {
		names := make([]string, 0, len(byKs[kind]))
		for n := range byKs[kind] {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			h := Hazard{Kind: kind, Kustomization: n, Resources: byKs[kind][n], Mitigated: true}
			for _, r := range h.Resources {
				h.Mitigated = h.Mitigated && r.Protected
			}
			rep.Hazards = append(rep.Hazards, h)
		}
	}
	return rep, nil
}

// clusterDirs lists the folders a root Kustomization applies: every environment, else base.
func clusterDirs(r *repo.Repo) ([]string, error) {
	envs, err := r.Environments()
	if err != nil {
		return nil, err
	}
	if len(envs) == 0 {
		return []string{path.Join(r.Layout.Clusters, "base")}, nil
	}
	out := make([]string, len(envs))
	for i, e := range envs {
		out[i] = path.Join(r.Layout.Clusters, e)
	}
	return out, nil
}

var waveName = regexp.MustCompile(`-wave-(\d+)(-[a-z0-9-]+)?$`)

// load builds the cluster folder and every app-tier Kustomization's path in it.
func load(r *repo.Repo, where string) (*tree, error) {
	m, err := r.Build(where)
	if err != nil {
		return nil, err
	}
	t := &tree{ks: map[string]owner{}, owned: map[string]Resource{}}
	for _, res := range m.Resources() {
		if res.GetKind() != kustv1.KustomizationKind || !strings.HasPrefix(res.GetApiVersion(), kustv1.GroupVersion.Group+"/") {
			continue
		}
		data, err := res.AsYAML()
		if err != nil {
			return nil, err
		}
		k := &kustv1.Kustomization{}
		if err := yaml.Unmarshal(data, k); err != nil {
			return nil, fmt.Errorf("decode Kustomization %s (%s): %w", res.GetName(), r.Label, err)
		}
		p := path.Clean(strings.TrimPrefix(k.Spec.Path, "./"))
		if p != r.Layout.Apps && !strings.HasPrefix(p, r.Layout.Apps+"/") {
			continue // not the app tier
		}
		o := owner{name: k.Name, wave: -1, prune: k.Spec.Prune}
		if mm := waveName.FindStringSubmatch(k.Name); mm != nil {
			o.wave, _ = strconv.Atoi(mm[1])
		}
		t.ks[k.Name] = o
		built, err := r.Build(p)
		if err != nil {
			return nil, err
		}
		for _, obj := range built.Resources() {
			gvk := obj.GetGvk()
			kind := gvk.Kind
			if gvk.Group != "" {
				kind += "." + gvk.Group
			}
			id := kind + " " + obj.GetNamespace() + "/" + obj.GetName()
			if obj.GetNamespace() == "" {
				id = kind + " " + obj.GetName()
			}
			t.owned[id] = Resource{ID: id, Kind: kind, From: k.Name, Protected: obj.GetAnnotations()[PruneAnnotation] == PruneDisabled}
		}
	}
	return t, nil
}

// Print writes the report and, when there are hazards, the safe sequence.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "cut-over from %s to the working tree (%s)\n", r.Base, r.Where)
	for _, k := range r.Removed {
		fmt.Fprintf(w, "removed Kustomization: %s\n", k)
	}
	moves := map[string]int{}
	var stateful []Resource
	for _, m := range r.Moving {
		moves[m.From+" -> "+m.To]++
		if m.Stateful() {
			stateful = append(stateful, m)
		}
	}
	keys := make([]string, 0, len(moves))
	for k := range moves {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Fprintf(w, "moving: %d resources\n", len(r.Moving))
	for _, k := range keys {
		fmt.Fprintf(w, "  %s: %d\n", k, moves[k])
	}
	for _, s := range stateful {
		fmt.Fprintf(w, "stateful resource moves: %s (%s -> %s)%s\n", s.ID, s.From, s.To, protected(s))
	}
	if len(r.Hazards) == 0 {
		fmt.Fprintln(w, "no hazard: no moving resource can be pruned")
		return
	}
	for _, h := range r.Hazards {
		state := "UNMITIGATED"
		if h.Mitigated {
			state = "mitigated (every resource carries " + PruneAnnotation + ": " + PruneDisabled + ")"
		}
		switch h.Kind {
		case PruneRemoval:
			fmt.Fprintf(w, "HAZARD %s [%s]: Kustomization %s is removed while it has prune: true at %s; its finalizer deletes the %d resources the new Kustomizations are to adopt\n", h.Kind, state, h.Kustomization, r.Base, len(h.Resources))
		case MoveUp:
			fmt.Fprintf(w, "HAZARD %s [%s]: %d resources leave Kustomization %s (prune: true) for a Kustomization that reconciles after it; %s prunes them before they are adopted\n", h.Kind, state, len(h.Resources), h.Kustomization, h.Kustomization)
		}
		for _, res := range h.Resources {
			loss := ""
			if res.Stateful() {
				loss = "  DATA LOSS"
			}
			fmt.Fprintf(w, "  %s -> %s%s%s\n", res.ID, res.To, protected(res), loss)
		}
	}
	if !r.Unmitigated() {
		return
	}
	fmt.Fprintln(w, "safe sequence:")
	step := 1
	for _, h := range r.Hazards {
		if h.Mitigated {
			continue
		}
		fmt.Fprintf(w, "  %d. merge a change of its own first that sets `prune: false` on Kustomization %s, and wait until\n     `kubectl -n flux-system get kustomization %s -o jsonpath='{.spec.prune}'` prints false\n", step, h.Kustomization, h.Kustomization)
		step++
	}
	fmt.Fprintf(w, "  %d. or, before merging, protect the objects Flux must not delete (at least the stateful ones):\n", step)
	for _, h := range r.Hazards {
		for _, res := range h.Resources {
			if !res.Protected && res.Stateful() {
				fmt.Fprintf(w, "     %s\n", annotate(res, PruneDisabled))
			}
		}
	}
	step++
	fmt.Fprintf(w, "  %d. then merge this change; the new Kustomizations adopt the unchanged objects in place\n", step)
	step++
	fmt.Fprintf(w, "  %d. once they own them: restore prune on any Kustomization you kept, and drop the annotations:\n", step)
	for _, h := range r.Hazards {
		for _, res := range h.Resources {
			if !res.Protected && res.Stateful() {
				fmt.Fprintf(w, "     %s\n", annotate(res, "-"))
			}
		}
	}
}

func protected(r Resource) string {
	if r.Protected {
		return " (prune disabled)"
	}
	return ""
}

func annotate(r Resource, value string) string {
	kind, rest, _ := strings.Cut(r.ID, " ")
	ns, name, ok := strings.Cut(rest, "/")
	if !ok {
		name, ns = rest, ""
	}
	nsFlag := ""
	if ns != "" {
		nsFlag = "-n " + ns + " "
	}
	arg := PruneAnnotation + "=" + value
	if value == "-" {
		arg = PruneAnnotation + "-"
	}
	return fmt.Sprintf("kubectl %sannotate %s/%s %s", nsFlag, strings.ToLower(kind), name, arg)
}
