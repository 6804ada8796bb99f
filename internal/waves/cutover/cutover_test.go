package cutover

import (
	"strings"
	"testing"
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
