package attribution_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/mirror/attribution"
	"github.com/siteops/siteops/internal/mirror/gitwriter"
	"github.com/siteops/siteops/internal/mirror/store"
)

const holdFinalizer = "example.com/hold"

// removalsOf returns the removal ops of one file with their resolutions, in hand-over order.
func (mw *mirrorWatch) removalsOf(ops []gitwriter.Op, path string) []gitwriter.Op {
	var out []gitwriter.Op
	for _, op := range ops {
		if op.Kind == gitwriter.OpDelete && op.Change.Path == path {
			out = append(out, op)
		}
	}
	return out
}

// removalResults returns the resolutions of uid's removal events (every event after its
// creation at createdRV), in resourceVersion order. Handed-over ops may carry no cursor, so
// resolutions are found by UID.
func (mw *mirrorWatch) removalResults(uid types.UID, createdRV string) []attribution.Resolved {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	var out []attribution.Resolved
	for _, r := range mw.results {
		if r.UID == uid && r.RV != createdRV {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, _ := strconv.Atoi(out[i].RV)
		b, _ := strconv.Atoi(out[j].RV)
		return a < b
	})
	return out
}

// TestRemovalAttributionEndToEnd drives removals through a real API server, its audit webhook
// and a real Redis: the removal credit stays with the person who deleted an object when a
// controller's service account later removes its finalizer, and a collection delete whose audit
// event lists no objects (dora's requests are audited at the Metadata level) is credited by its
// namespace and resource within its time window.
func TestRemovalAttributionEndToEnd(t *testing.T) {
	ac := startAuditedCluster(t, "prod")
	ctx := context.Background()
	const grace = 3 * time.Second
	admin := ac.c.Client
	users := map[string]client.Client{}
	for _, u := range []string{"alice", "dora", "frank"} {
		c, err := client.New(ac.userConfig(t, u), client.Options{Scheme: ac.c.Scheme})
		if err != nil {
			t.Fatal(err)
		}
		users[u] = c
	}
	ctlNS := ac.c.Namespace(t, "ctl", nil)
	controller, err := client.New(ac.serviceAccountConfig(t, ctlNS, "finalizer-controller"), client.Options{Scheme: ac.c.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	removeFinalizer := func(cm *corev1.ConfigMap) {
		t.Helper()
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		if err := controller.Patch(ctx, cm, client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatalf("the controller removes the finalizer of %s: %v", cm.Name, err)
		}
	}
	createdRV := map[types.UID]string{}
	create := func(ns, name string, labels map[string]string, finalizers ...string) *corev1.ConfigMap {
		t.Helper()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, Finalizers: finalizers}}
		if err := admin.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		createdRV[cm.UID] = cm.ResourceVersion
		return cm
	}
	checkRemovals := func(t *testing.T, mw *mirrorWatch, ops []gitwriter.Op, cm *corev1.ConfigMap, n int, want string, first ...store.AttributionResult) {
		t.Helper()
		rm := mw.removalsOf(ops, cm.Namespace+"/"+cm.Name+".yaml")
		if len(rm) != n {
			t.Fatalf("%d removal ops of %s, want %d", len(rm), cm.Name, n)
		}
		results := mw.removalResults(cm.UID, createdRV[cm.UID])
		for i, op := range rm {
			if got := author(op); got != want {
				t.Errorf("removal %d of %s authored by %s, want %s; resolutions %+v", i, cm.Name, got, want, results)
			}
		}
		if len(results) == 0 || !slices.Contains(first, results[0].Result) {
			t.Errorf("removals of %s resolved %+v, want the first one of %v", cm.Name, results, first)
		}
	}

	t.Run("sticky removal credit", func(t *testing.T) {
		ns := ac.c.Namespace(t, "sticky", nil)
		mw := startWatch(t, ac, ns, attribution.Config{Route: "prod", Grace: grace})
		held := create(ns, "held", nil, holdFinalizer)
		if err := users["alice"].Delete(ctx, held); err != nil {
			t.Fatal(err)
		}
		removeFinalizer(held)
		// create, the deletionTimestamp (alice's delete), the removal (the controller's patch)
		ops := mw.waitHanded(t, 3, 30*time.Second)
		checkRemovals(t, mw, ops, held, 2, "alice", store.AttributionExactUser)
	})

	// A tenant (edit in its namespace) removes the finalizer of an object the platform's user
	// deleted there, to be named as the one who removed it: the credit stays with alice.
	t.Run("a tenant cannot take a removal by patching the finalizer", func(t *testing.T) {
		tenant := ac.c.Tenant(t, "tenant", nil)
		mw := startWatch(t, ac, tenant.Namespace, attribution.Config{Route: "prod", Grace: grace})
		held := create(tenant.Namespace, "held", nil, holdFinalizer)
		if err := users["alice"].Delete(ctx, held); err != nil {
			t.Fatal(err)
		}
		patch := []byte(`{"metadata":{"finalizers":null}}`)
		if err := tenant.Client.Patch(ctx, held, client.RawPatch(types.MergePatchType, patch)); err != nil {
			t.Fatalf("the tenant removes the finalizer: %v", err)
		}
		ops := mw.waitHanded(t, 3, 30*time.Second)
		checkRemovals(t, mw, ops, held, 2, "alice", store.AttributionExactUser)
	})

	t.Run("collection delete without items", func(t *testing.T) {
		ns := ac.c.Namespace(t, "scope", nil)
		mw := startWatch(t, ac, ns, attribution.Config{Route: "prod", Grace: grace})
		batch := map[string]string{"batch": "d"}
		var members []*corev1.ConfigMap
		for i := range 3 {
			members = append(members, create(ns, fmt.Sprintf("member-%d", i), batch))
		}
		held := create(ns, "member-held", batch, holdFinalizer)
		solo := create(ns, "solo", nil)
		if err := users["dora"].DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns), client.MatchingLabels(batch)); err != nil {
			t.Fatal(err)
		}
		// Right after, in the same namespace and inside the collection delete's window, frank
		// deletes another object: his own delete is his.
		if err := users["frank"].Delete(ctx, solo); err != nil {
			t.Fatal(err)
		}
		removeFinalizer(held)
		// 5 creates, 3 removals, held's deletionTimestamp and removal, solo's removal
		ops := mw.waitHanded(t, 11, 60*time.Second)
		for _, m := range members {
			checkRemovals(t, mw, ops, m, 1, "dora", store.AttributionExactDeleteCollectionScope)
		}
		checkRemovals(t, mw, ops, held, 2, "dora", store.AttributionExactDeleteCollectionScope)
		checkRemovals(t, mw, ops, solo, 1, "frank", store.AttributionExactUser, store.AttributionWeak)
	})
}
