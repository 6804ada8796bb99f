package shard

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func ns(name string, l map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
}

func TestSelectorsSplitObjects(t *testing.T) {
	main, err := Parse(MainSelector)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Parse(ForShard("a"))
	if err != nil {
		t.Fatal(err)
	}
	all, _ := Parse("")
	unlabelled, inA, inB := ns("u", nil), ns("x", map[string]string{Key: "a"}), ns("y", map[string]string{Key: "b"})
	for _, tc := range []struct {
		sel  Selector
		obj  client.Object
		want bool
	}{
		{main, unlabelled, true}, {main, inA, false}, {main, inB, false},
		{a, unlabelled, false}, {a, inA, true}, {a, inB, false},
		{all, unlabelled, true}, {all, inA, true}, {all, inB, true},
	} {
		if got := tc.sel.Owns(tc.obj); got != tc.want {
			t.Errorf("%q owns %s: %v, want %v", tc.sel, tc.obj.GetName(), got, tc.want)
		}
	}
	if _, err := Parse("a in (b"); err == nil {
		t.Error("a malformed selector was accepted")
	}
}

// The shards an object moves between both see the move even when the controller's own
// predicates ignore label changes: one takes it over, the other lets go.
func TestForPassesAnObjectMovingIn(t *testing.T) {
	a, _ := Parse(ForShard("a"))
	main, _ := Parse(MainSelector)
	generation := predicate.GenerationChangedPredicate{}
	moved := event.UpdateEvent{ObjectOld: ns("x", nil), ObjectNew: ns("x", map[string]string{Key: "a"})}
	if !a.For(generation).Update(moved) {
		t.Error("shard a did not see an object moving into it")
	}
	if !main.For(generation).Update(moved) {
		t.Error("the main instance did not see an object leaving it, and keeps what it holds for it")
	}
	relabelled := event.UpdateEvent{ObjectOld: ns("x", map[string]string{Key: "a", "k": "1"}), ObjectNew: ns("x", map[string]string{Key: "a", "k": "2"})}
	if a.For(generation).Update(relabelled) {
		t.Error("a label change inside the shard passed a generation predicate")
	}
	if !a.For(generation).Create(event.CreateEvent{Object: ns("x", map[string]string{Key: "a"})}) || a.For(generation).Create(event.CreateEvent{Object: ns("y", nil)}) {
		t.Error("creations are not split by shard")
	}
	if a.For(generation).Delete(event.DeleteEvent{Object: ns("y", nil)}) {
		t.Error("shard a saw the deletion of the main instance's object")
	}
}

type counting struct{ n int }

func (c *counting) Reconcile(context.Context, reconcile.Request) (reconcile.Result, error) {
	c.n++
	return reconcile.Result{}, nil
}

func TestReconcilerSkipsOtherShards(t *testing.T) {
	cl := fake.NewClientBuilder().WithObjects(ns("mine", map[string]string{Key: "a"}), ns("theirs", nil)).Build()
	a, _ := Parse(ForShard("a"))
	inner := &counting{}
	r := Wrap(a, cl, func() client.Object { return &corev1.Namespace{} }, inner)
	for _, name := range []string{"mine", "theirs", "gone"} {
		if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKey{Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	// "mine" and the deleted "gone" reach the part's reconciler; "theirs" does not.
	if inner.n != 2 {
		t.Errorf("inner reconciled %d requests, want 2", inner.n)
	}
	if Wrap(Selector{}, cl, nil, inner) != reconcile.Reconciler(inner) {
		t.Error("without sharding the reconciler is wrapped")
	}
}

// A kind that follows another (a rule its target) is placed by the labels LabelsOf returns.
func TestReconcilerFollowsAnotherObject(t *testing.T) {
	cl := fake.NewClientBuilder().WithObjects(ns("rule-of-a", nil), ns("rule-of-main", map[string]string{Key: "a"})).Build()
	a, _ := Parse(ForShard("a"))
	inner := &counting{}
	r := &Reconciler{Reader: cl, Selector: a, New: func() client.Object { return &corev1.Namespace{} }, Inner: inner,
		LabelsOf: func(_ context.Context, o client.Object) (map[string]string, error) {
			if o.GetName() == "rule-of-a" {
				return map[string]string{Key: "a"}, nil
			}
			return nil, nil
		}}
	for _, name := range []string{"rule-of-a", "rule-of-main"} {
		if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKey{Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	if inner.n != 1 {
		t.Errorf("inner reconciled %d requests, want only the one whose target is in shard a", inner.n)
	}
}
