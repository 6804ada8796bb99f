package fairness

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestNamespaceHoldsOnlyItsShare: while one namespace's requests hold its slots, its next
// request is deferred (put back in the queue, not run) and another namespace's runs at once.
func TestNamespaceHoldsOnlyItsShare(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan string, 8)
	inner := reconcile.Func(func(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
		entered <- req.Namespace
		if req.Namespace == "noisy" {
			<-release
		}
		return ctrl.Result{}, nil
	})
	l := &Limit{Inner: inner, Controller: "test", PerNamespace: 2, RetryAfter: 3 * time.Second}
	req := func(ns, name string) ctrl.Request {
		return ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
	}
	held := make(chan struct{})
	for i := range 2 {
		go func() {
			_, _ = l.Reconcile(context.Background(), req("noisy", string(rune('a'+i))))
			held <- struct{}{}
		}()
	}
	for range 2 {
		<-entered
	}
	before := testutil.ToFloat64(Deferred.WithLabelValues("test"))
	type outcome struct {
		res ctrl.Result
		err error
	}
	third := make(chan outcome, 1)
	go func() {
		res, err := l.Reconcile(context.Background(), req("noisy", "c"))
		third <- outcome{res, err}
	}()
	var res ctrl.Result
	var err error
	select {
	case o := <-third:
		res, err = o.res, o.err
	case ns := <-entered:
		t.Fatalf("the third request of %s ran while its namespace held its two slots", ns)
	}
	if err != nil || res.RequeueAfter != 3*time.Second {
		t.Fatalf("third request of a namespace at its limit: %+v, %v; want deferred by 3s", res, err)
	}
	if got := testutil.ToFloat64(Deferred.WithLabelValues("test")) - before; got != 1 {
		t.Fatalf("deferred counter moved by %v, want 1", got)
	}
	select {
	case ns := <-entered:
		t.Fatalf("the deferred request of %s ran", ns)
	default:
	}
	if _, err := l.Reconcile(context.Background(), req("quiet", "x")); err != nil {
		t.Fatal(err)
	}
	if ns := <-entered; ns != "quiet" {
		t.Fatalf("ran %s, want quiet", ns)
	}
	close(release)
	<-held
	<-held
	if n := l.InFlight("noisy"); n != 0 {
		t.Fatalf("%d requests of noisy still counted in flight", n)
	}
	if _, err := l.Reconcile(context.Background(), req("noisy", "c")); err != nil {
		t.Fatal(err)
	}
	if ns := <-entered; ns != "noisy" {
		t.Fatalf("ran %s, want noisy once its slots were free", ns)
	}
}
