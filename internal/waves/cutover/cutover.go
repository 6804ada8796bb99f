// Package cutover checks that moving app resources from one Flux Kustomization to another (the
// split of `apps` into waves, or a service changing wave) cannot garbage-collect them, and prints
// the safe sequence when it could.
package cutover

import (
	"fmt"
	"path"
	"sort"
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
	// Protected means the object carries kustomize.toolkit.fluxcd.io/prune: disabled (in git at
	// the base ref, or on the live object with --live).
	Protected bool
	// LiveOnly marks an entry of the live inventory that no Kustomization of the working tree
	// builds: nothing adopts it, so a garbage-collecting owner deletes it.
	LiveOnly bool `json:",omitempty"`
	// Helm lists, for a HelmRelease, the live objects of its release: uninstalling the release
	// (when the HelmRelease is deleted) deletes them.
	Helm []Resource `json:",omitempty"`
}

// HelmReleaseKind is the kind of a Flux HelmRelease in resource IDs.
const HelmReleaseKind = "HelmRelease.helm.toolkit.fluxcd.io"

// Stateful reports kinds whose deletion loses data. A HelmRelease counts: deleting it uninstalls
// the release, which deletes everything the chart created.
func (r Resource) Stateful() bool {
	switch r.Kind {
	case "Cluster.postgresql.cnpg.io", "PersistentVolumeClaim", "StatefulSet.apps", HelmReleaseKind:
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
	// DeletionPolicy is the old owner's spec.deletionPolicy ("" for the default MirrorPrune).
	DeletionPolicy string
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
	// Notes explain why something that looks dangerous is not (an owner that releases).
	Notes []string
	// Drift lists where the live cluster differs from the git base ref (with --live and --base).
	Drift []string
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
	name           string
	prune, suspend bool
	deletionPolicy string
	dependsOn      []string
	// emptyInventory is known only live: a Kustomization without inventory deletes nothing.
	emptyInventory bool
}

// deletesOnRemoval mirrors kustomize-controller v1.9.6 (finalizerShouldDeleteResources): a
// suspended Kustomization or one without inventory deletes nothing; otherwise Delete and
// WaitForTermination always delete, MirrorPrune (the default) deletes when prune is on, Orphan
// never does.
func (o owner) deletesOnRemoval() bool {
	if o.suspend || o.emptyInventory {
		return false
	}
	switch o.deletionPolicy {
	case "", kustv1.DeletionPolicyMirrorPrune:
		return o.prune
	case kustv1.DeletionPolicyDelete, kustv1.DeletionPolicyWaitForTermination:
		return true
	}
	return false
}

// prunesWhileStaying says whether the owner deletes objects that leave its build: a suspended
// one does not reconcile; once resumed it only deletes objects that still carry its labels.
func (o owner) prunesWhileStaying() bool { return o.prune && !o.suspend }

// why explains in words why an owner does not delete, for the report.
func (o owner) why() string {
	switch {
	case o.suspend:
		return "suspended (a suspended Kustomization deletes nothing; keep it suspended until the new owners have reconciled)"
	case o.emptyInventory:
		return "its inventory is empty"
	case o.deletionPolicy == kustv1.DeletionPolicyOrphan:
		return "deletionPolicy: Orphan"
	}
	return "prune: false"
}

type tree struct {
	ks    map[string]owner
	owned map[string]Resource // id → resource (From set to its owner)
}

// waitsFor reports whether Kustomization from waits, directly or through others, for to.
func (t *tree) waitsFor(from, to string) bool {
	seen := map[string]bool{}
	stack := []string{from}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, d := range t.ks[n].dependsOn {
			if d == to {
				return true
			}
			if !seen[d] {
				seen[d] = true
				stack = append(stack, d)
			}
		}
	}
	return false
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
	return compare(b, a, before.Label, where, false), nil
}

// compare follows every object of the before tree to its owner in the after tree. With live,
// objects no Kustomization of the after tree builds are at risk too: before is the cluster's
// inventory, which may hold objects git no longer has.
func compare(b, a *tree, label, where string, live bool) *Report {
	rep := &Report{Base: label, Where: where}
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
	released, suspended := map[string]bool{}, map[string]bool{}
	for _, id := range ids {
		old := b.owned[id]
		now, ok := a.owned[id]
		res := old
		switch {
		case !ok && !live, ok && now.From == old.From:
			continue
		case !ok:
			res.LiveOnly = true
		default:
			res.To = now.From
			rep.Moving = append(rep.Moving, res)
		}
		from := b.ks[old.From]
		if _, still := a.ks[old.From]; !still {
			if !from.deletesOnRemoval() {
				released[old.From] = true
				continue // the old owner releases without garbage collection
			}
			byKs[PruneRemoval][old.From] = append(byKs[PruneRemoval][old.From], res)
			continue
		}
		if res.LiveOnly || !from.prunesWhileStaying() {
			if !res.LiveOnly && from.prune && from.suspend && !a.waitsFor(old.From, now.From) {
				suspended[old.From] = true
			}
			continue // an object leaving git on purpose, or an owner that does not prune now
		}
		// The old owner stays and prunes the object when it leaves its build. A move is safe only
		// when the old owner waits for the new one (a lower wave, or a service it depends on): the
		// new owner reconciles first and relabels the object, and Flux deletes only objects that
		// still carry the pruning Kustomization's labels.
		if !a.waitsFor(old.From, now.From) {
			byKs[MoveUp][old.From] = append(byKs[MoveUp][old.From], res)
		}
	}
	for _, n := range rep.Removed {
		if released[n] {
			rep.Notes = append(rep.Notes, fmt.Sprintf("removed Kustomization %s releases its objects without deleting them: %s", n, b.ks[n].why()))
		}
	}
	for _, n := range sortedKeys(suspended) {
		rep.Notes = append(rep.Notes, fmt.Sprintf("Kustomization %s is suspended with prune: true: objects leaving it are safe only while it stays suspended; resume it after the new owners have reconciled (Flux then deletes only objects that still carry its labels)", n))
	}
	for _, kind := range []HazardKind{PruneRemoval, MoveUp} {
		names := make([]string, 0, len(byKs[kind]))
		for n := range byKs[kind] {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			h := Hazard{Kind: kind, Kustomization: n, Resources: byKs[kind][n], Mitigated: true, DeletionPolicy: b.ks[n].deletionPolicy}
			for _, r := range h.Resources {
				h.Mitigated = h.Mitigated && r.Protected
			}
			rep.Hazards = append(rep.Hazards, h)
		}
	}
	return rep
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

// ID names an object as the report does: "<kind>.<group> <namespace>/<name>"; it also returns
// "<kind>.<group>".
func ID(group, kind, namespace, name string) (id, groupKind string) {
	if group != "" {
		kind += "." + group
	}
	if namespace == "" {
		return kind + " " + name, kind
	}
	return kind + " " + namespace + "/" + name, kind
}

func ownerOf(k *kustv1.Kustomization) owner {
	o := owner{name: k.Name, prune: k.Spec.Prune, suspend: k.Spec.Suspend, deletionPolicy: k.Spec.DeletionPolicy}
	for _, d := range k.Spec.DependsOn {
		o.dependsOn = append(o.dependsOn, d.Name)
	}
	return o
}

// inAppTier reports whether a Kustomization path lies in the apps folder.
func inAppTier(p, apps string) bool {
	p = path.Clean(strings.TrimPrefix(p, "./"))
	return p == apps || strings.HasPrefix(p, apps+"/")
}

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
		if !inAppTier(k.Spec.Path, r.Layout.Apps) {
			continue // not the app tier
		}
		p := path.Clean(strings.TrimPrefix(k.Spec.Path, "./"))
		t.ks[k.Name] = ownerOf(k)
		built, err := r.Build(p)
		if err != nil {
			return nil, err
		}
		for _, obj := range built.Resources() {
			gvk := obj.GetGvk()
			id, kind := ID(gvk.Group, gvk.Kind, obj.GetNamespace(), obj.GetName())
			t.owned[id] = Resource{ID: id, Kind: kind, From: k.Name, Protected: obj.GetAnnotations()[PruneAnnotation] == PruneDisabled}
		}
	}
	return t, nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
