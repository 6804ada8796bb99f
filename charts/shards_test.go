package charts_test

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/siteops/siteops/internal/shard"
)

// TestShardsRenderOneInstanceEach: with shards listed, the chart renders the main instance and
// one Deployment per shard. Their selectors split every object between them (each label set is
// reconciled by exactly one instance), each elects its leader on its own Lease, no Deployment or
// PodDisruptionBudget selects another instance's pods, the metrics Service scrapes them all, and
// the webhook and push Services keep sending to the main instance.
func TestShardsRenderOneInstanceEach(t *testing.T) {
	m := render(t, "siteops", namespace, values(t, "shards: [shard1, shard2]\nflags: {push-webhook-bind-address: ':9292'}"))
	var deployments []*appsv1.Deployment
	for _, u := range m.kind("Deployment") {
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
			t.Fatal(err)
		}
		deployments = append(deployments, &d)
	}
	names := []string{"siteops-manager", "siteops-manager-shard1", "siteops-manager-shard2"}
	if len(deployments) != len(names) {
		t.Fatalf("%d Deployments, want %v", len(deployments), names)
	}
	selectors := map[string]shard.Selector{}
	leases := map[string]bool{}
	for i, d := range deployments {
		if d.Name != names[i] {
			t.Fatalf("Deployment %d is %s, want %s", i, d.Name, names[i])
		}
		_, o := parseArgs(t, d)
		sel, err := shard.Parse(o.WatchLabelSelector)
		if err != nil || sel.All() {
			t.Fatalf("%s: --watch-label-selector %q (%v), want a selector", d.Name, o.WatchLabelSelector, err)
		}
		selectors[d.Name] = sel
		if leases[o.LeaderElectionID] {
			t.Errorf("%s shares the Lease %s", d.Name, o.LeaderElectionID)
		}
		leases[o.LeaderElectionID] = true
		for j, other := range deployments {
			if i != j && selects(d.Spec.Selector.MatchLabels, other.Spec.Template.Labels) {
				t.Errorf("Deployment %s selects the pods of %s", d.Name, other.Name)
			}
		}
	}
	for _, labels := range []map[string]string{nil, {shard.Key: "shard1"}, {shard.Key: "shard2"}, {"team": "a"}} {
		var owners []string
		for name, sel := range selectors {
			if sel.Matches(labels) {
				owners = append(owners, name)
			}
		}
		if len(owners) != 1 {
			t.Errorf("objects labelled %v are reconciled by %v, want exactly one instance", labels, owners)
		}
	}

	var metrics, webhook, push corev1.Service
	if !m.get(t, "Service", "siteops-metrics", &metrics) || !m.get(t, "Service", "siteops-webhook-service", &webhook) || !m.get(t, "Service", "siteops-push", &push) {
		t.Fatal("want the metrics, webhook and push Services")
	}
	for _, d := range deployments {
		if !selects(metrics.Spec.Selector, d.Spec.Template.Labels) {
			t.Errorf("the metrics Service does not scrape %s", d.Name)
		}
		main := d.Name == "siteops-manager"
		for _, svc := range []corev1.Service{webhook, push} {
			if selects(svc.Spec.Selector, d.Spec.Template.Labels) != main {
				t.Errorf("Service %s selects %s: %v, want only the main instance", svc.Name, d.Name, !main)
			}
		}
		var pdb struct {
			Spec struct {
				Selector struct{ MatchLabels map[string]string }
			}
		}
		if !m.get(t, "PodDisruptionBudget", d.Name, &pdb) {
			t.Errorf("no PodDisruptionBudget for %s", d.Name)
			continue
		}
		for _, other := range deployments {
			if got := selects(pdb.Spec.Selector.MatchLabels, other.Spec.Template.Labels); got != (other.Name == d.Name) {
				t.Errorf("the PodDisruptionBudget of %s selects %s: %v", d.Name, other.Name, got)
			}
		}
	}

	// Without shards, nothing changes: one instance, reconciling everything.
	_, o := parseArgs(t, render(t, "siteops", namespace, values(t, "")).deployment(t))
	if o.WatchLabelSelector != "" || o.LeaderElectionID != "siteops-manager.siteops.dev" {
		t.Errorf("without shards: selector %q, Lease %s", o.WatchLabelSelector, o.LeaderElectionID)
	}
}
