package cutover

import (
	"fmt"
	"sort"
	"strings"

	kustv1 "github.com/fluxcd/kustomize-controller/api/v1"

	"github.com/siteops/siteops/internal/waves/repo"
)

// Live is what the cluster runs: the app-tier Flux Kustomizations with their inventories, and
// the state of the objects those inventories name.
type Live struct {
	// Label names the cluster in the report ("the live cluster").
	Label string
	// Kustomizations are the app-tier Kustomizations (spec.path in the apps folder).
	Kustomizations []kustv1.Kustomization
	// Objects holds, by resource ID, what the cluster says about each inventory entry.
	Objects map[string]LiveObject
}

// LiveObject is an inventory entry's live object.
type LiveObject struct {
	// Found is false when the object no longer exists (or its kind is not served).
	Found bool
	// Protected means the live object carries kustomize.toolkit.fluxcd.io/prune: disabled.
	Protected bool
	// Helm lists, for a HelmRelease, the live objects of its release.
	Helm []Resource
}

// fluxOwnerLabel marks the objects a Flux Kustomization applies (and prunes).
const fluxOwnerLabel = "kustomize.toolkit.fluxcd.io/name"

// InventoryEntry is a parsed status.inventory entry.
type InventoryEntry struct {
	Group, Version, Kind, Namespace, Name string
}

// ParseInventoryEntry parses a Flux inventory entry: ID "<namespace>_<name>_<group>_<kind>" (the
// namespace and group empty when not applicable) and Version "v1".
func ParseInventoryEntry(ref kustv1.ResourceRef) (InventoryEntry, error) {
	parts := strings.Split(ref.ID, "_")
	if len(parts) != 4 || parts[1] == "" || parts[3] == "" {
		return InventoryEntry{}, fmt.Errorf("inventory entry %q is not <namespace>_<name>_<group>_<kind>", ref.ID)
	}
	return InventoryEntry{Namespace: parts[0], Name: parts[1], Group: parts[2], Kind: parts[3], Version: ref.Version}, nil
}

// ID is the entry's resource ID as the report writes it.
func (e InventoryEntry) ID() string {
	id, _ := ID(e.Group, e.Kind, e.Namespace, e.Name)
	return id
}

// InAppTier reports whether a Kustomization's spec.path lies in the apps folder.
func InAppTier(k *kustv1.Kustomization, apps string) bool { return inAppTier(k.Spec.Path, apps) }

// liveTree makes the "before" tree from the cluster: owners with their live spec, objects from
// their inventories (not from a git build), protection from the live objects.
func liveTree(l *Live) (*tree, error) {
	t := &tree{ks: map[string]owner{}, owned: map[string]Resource{}}
	for i := range l.Kustomizations {
		k := &l.Kustomizations[i]
		o := ownerOf(k)
		o.emptyInventory = k.Status.Inventory == nil || len(k.Status.Inventory.Entries) == 0
		t.ks[k.Name] = o
		if o.emptyInventory {
			continue
		}
		for _, ref := range k.Status.Inventory.Entries {
			e, err := ParseInventoryEntry(ref)
			if err != nil {
				return nil, fmt.Errorf("inventory of Kustomization %s/%s: %w", k.Namespace, k.Name, err)
			}
			id, kind := ID(e.Group, e.Kind, e.Namespace, e.Name)
			obj := l.Objects[id]
			t.owned[id] = Resource{ID: id, Kind: kind, From: k.Name, Protected: obj.Protected, Helm: obj.Helm}
		}
	}
	return t, nil
}

// CheckLive compares what the cluster runs with the working tree's cluster folder where (e.g.
// "clusters/prod"). With base (the git ref the cluster is meant to run; may be nil) it also lists
// where the cluster differs from git.
func CheckLive(l *Live, base, after *repo.Repo, where string) (*Report, error) {
	b, err := liveTree(l)
	if err != nil {
		return nil, err
	}
	a, err := load(after, where)
	if err != nil {
		return nil, err
	}
	label := l.Label
	if label == "" {
		label = "the live cluster"
	}
	rep := compare(b, a, label, where, true)
	for i := range l.Kustomizations {
		k := &l.Kustomizations[i]
		if _, stays := a.ks[k.Name]; !stays && k.Labels[fluxOwnerLabel] == "" {
			rep.Notes = append(rep.Notes, fmt.Sprintf("Kustomization %s carries no %s label, so no Flux Kustomization applies it: the change does not delete it; it is checked as if you delete it by hand", k.Name, fluxOwnerLabel))
		}
	}
	if base != nil {
		g, err := load(base, where)
		if err != nil {
			return nil, err
		}
		rep.Drift = drift(b, g, base.Label)
	}
	return rep, nil
}

// drift lists where the live owners differ from the git base: spec fields that decide garbage
// collection, Kustomizations only one side has, and inventory entries the git build lacks.
func drift(live, git *tree, ref string) []string {
	var out []string
	names := map[string]bool{}
	for n := range live.ks {
		names[n] = true
	}
	for n := range git.ks {
		names[n] = true
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	for _, n := range sorted {
		l, inLive := live.ks[n]
		g, inGit := git.ks[n]
		switch {
		case !inGit:
			out = append(out, fmt.Sprintf("Kustomization %s exists on the cluster but not at %s", n, ref))
			continue
		case !inLive:
			out = append(out, fmt.Sprintf("Kustomization %s is at %s but not on the cluster", n, ref))
			continue
		}
		if l.prune != g.prune {
			out = append(out, fmt.Sprintf("Kustomization %s has prune: %t on the cluster, %t at %s", n, l.prune, g.prune, ref))
		}
		if l.suspend != g.suspend {
			out = append(out, fmt.Sprintf("Kustomization %s has suspend: %t on the cluster, %t at %s", n, l.suspend, g.suspend, ref))
		}
		if policy(l.deletionPolicy) != policy(g.deletionPolicy) {
			out = append(out, fmt.Sprintf("Kustomization %s has deletionPolicy: %s on the cluster, %s at %s", n, policy(l.deletionPolicy), policy(g.deletionPolicy), ref))
		}
	}
	ids := make([]string, 0, len(live.owned))
	for id := range live.owned {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		r := live.owned[id]
		if g, ok := git.owned[id]; !ok {
			out = append(out, fmt.Sprintf("the inventory of %s holds %s, which %s does not build", r.From, id, ref))
		} else if g.From != r.From {
			out = append(out, fmt.Sprintf("%s is owned by %s on the cluster, by %s at %s", id, r.From, g.From, ref))
		}
		if r.Protected && !git.owned[id].Protected {
			out = append(out, fmt.Sprintf("%s carries %s: %s on the cluster only", id, PruneAnnotation, PruneDisabled))
		}
	}
	return out
}

func policy(p string) string {
	if p == "" {
		return kustv1.DeletionPolicyMirrorPrune
	}
	return p
}
