package cutover

import (
	"strings"
	"testing"

	kustv1 "github.com/fluxcd/kustomize-controller/api/v1"
)

func TestAnnotateCommands(t *testing.T) {
	r := Resource{ID: "Cluster.postgresql.cnpg.io nextcloud-db/nextcloud-db", Kind: "Cluster.postgresql.cnpg.io"}
	if got := annotate(r, PruneDisabled); got != "kubectl -n nextcloud-db annotate cluster.postgresql.cnpg.io/nextcloud-db kustomize.toolkit.fluxcd.io/prune=disabled" {
		t.Fatalf("annotate: %s", got)
	}
	if got := annotate(Resource{ID: "Namespace media"}, "-"); got != "kubectl annotate namespace/media kustomize.toolkit.fluxcd.io/prune-" {
		t.Fatalf("annotate cluster-scoped: %s", got)
	}
}

func TestStatefulKinds(t *testing.T) {
	for kind, want := range map[string]bool{"Cluster.postgresql.cnpg.io": true, "PersistentVolumeClaim": true, "StatefulSet.apps": true, "Deployment.apps": false, "Cluster.other.io": false} {
		if got := (Resource{Kind: kind}).Stateful(); got != want {
			t.Errorf("%s stateful = %t", kind, got)
		}
	}
}

func TestPrintWithoutHazards(t *testing.T) {
	var b strings.Builder
	(&Report{Base: "main", Where: "clusters/dev", Moving: []Resource{{ID: "Service a/a", From: "apps-wave-1", To: "apps-wave-0"}}}).Print(&b)
	if !strings.Contains(b.String(), "apps-wave-1 -> apps-wave-0: 1") || !strings.Contains(b.String(), "no hazard") {
		t.Fatalf("report:\n%s", b.String())
	}
}

func TestParseInventoryEntry(t *testing.T) {
	e, err := ParseInventoryEntry(kustv1.ResourceRef{ID: "nextcloud-db_nextcloud-db_postgresql.cnpg.io_Cluster", Version: "v1"})
	if err != nil || e.ID() != "Cluster.postgresql.cnpg.io nextcloud-db/nextcloud-db" || e.Version != "v1" {
		t.Fatalf("%+v %v", e, err)
	}
	if e, err := ParseInventoryEntry(kustv1.ResourceRef{ID: "_media__Namespace", Version: "v1"}); err != nil || e.ID() != "Namespace media" {
		t.Fatalf("cluster-scoped: %+v %v", e, err)
	}
	for _, bad := range []string{"", "a_b_c", "ns__g_Kind", "ns_name_g_"} {
		if _, err := ParseInventoryEntry(kustv1.ResourceRef{ID: bad}); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// The finalizer rules of kustomize-controller v1.9.6 (finalizerShouldDeleteResources).
func TestDeletesOnRemoval(t *testing.T) {
	for _, c := range []struct {
		o    owner
		want bool
	}{
		{owner{prune: true}, true},
		{owner{prune: false}, false},
		{owner{prune: true, deletionPolicy: kustv1.DeletionPolicyMirrorPrune}, true},
		{owner{prune: true, deletionPolicy: kustv1.DeletionPolicyOrphan}, false},
		{owner{prune: false, deletionPolicy: kustv1.DeletionPolicyDelete}, true},
		{owner{prune: false, deletionPolicy: kustv1.DeletionPolicyWaitForTermination}, true},
		{owner{prune: true, suspend: true}, false},
		{owner{prune: false, suspend: true, deletionPolicy: kustv1.DeletionPolicyDelete}, false},
		{owner{prune: true, emptyInventory: true}, false},
	} {
		if got := c.o.deletesOnRemoval(); got != c.want {
			t.Errorf("%+v deletes on removal: %t, want %t", c.o, got, c.want)
		}
	}
	if (owner{prune: true, suspend: true}).prunesWhileStaying() || !(owner{prune: true}).prunesWhileStaying() {
		t.Error("a suspended owner does not prune; an active one with prune does")
	}
}

// compare on hand-made trees: a move is safe only towards a Kustomization the old owner waits for
// (directly or through others), a suspended owner that stays deletes nothing but is noted, and a
// live-only object of an owner that stays is not a hazard (it leaves git on purpose).
func TestCompareOrdersByDependsOn(t *testing.T) {
	before := &tree{
		ks: map[string]owner{
			"a": {name: "a", prune: true}, "b": {name: "b", prune: true, dependsOn: []string{"a"}},
			"s": {name: "s", prune: true, suspend: true},
		},
		owned: map[string]Resource{
			"ConfigMap x/down": {ID: "ConfigMap x/down", Kind: "ConfigMap", From: "b"},
			"ConfigMap x/up":   {ID: "ConfigMap x/up", Kind: "ConfigMap", From: "a"},
			"ConfigMap x/susp": {ID: "ConfigMap x/susp", Kind: "ConfigMap", From: "s"},
			"ConfigMap x/gone": {ID: "ConfigMap x/gone", Kind: "ConfigMap", From: "a"},
		},
	}
	after := &tree{
		ks: map[string]owner{
			"a": {name: "a", prune: true}, "b": {name: "b", prune: true, dependsOn: []string{"a"}},
			"c": {name: "c", prune: true, dependsOn: []string{"b"}}, "s": {name: "s", prune: true, suspend: true},
		},
		owned: map[string]Resource{
			"ConfigMap x/down": {ID: "ConfigMap x/down", From: "a"}, // b waits for a: safe
			"ConfigMap x/up":   {ID: "ConfigMap x/up", From: "c"},   // a does not wait for c
			"ConfigMap x/susp": {ID: "ConfigMap x/susp", From: "c"},
		},
	}
	rep := compare(before, after, "live", "clusters/x", true)
	if len(rep.Moving) != 3 || len(rep.Hazards) != 1 || rep.Hazards[0].Kind != MoveUp || rep.Hazards[0].Kustomization != "a" ||
		len(rep.Hazards[0].Resources) != 1 || rep.Hazards[0].Resources[0].ID != "ConfigMap x/up" {
		t.Fatalf("moving %d, hazards %+v", len(rep.Moving), rep.Hazards)
	}
	if len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "Kustomization s is suspended with prune: true") {
		t.Fatalf("notes %v", rep.Notes)
	}
	// Through another Kustomization: c waits for a via b.
	if !after.waitsFor("c", "a") || after.waitsFor("a", "c") {
		t.Fatal("waitsFor is not transitive or not directed")
	}
}
