// Package shard splits the objects each part reconciles between manager instances by label, the
// way Flux's controllers do with --watch-label-selector: every instance caches and serves every
// object (the injection webhook and the push receiver answer for all of them), but reconciles
// only those its selector matches. The main instance takes the objects without the Key label
// (selector "!sharding.siteops.dev/key"), a shard "a" those with Key=a; each instance elects its
// own leader on a Lease of its own.
//
// An object moved between shards (its label changed) is handed over: the shard it leaves sees no
// more events for it and skips requests still queued, the shard it joins reconciles it once from
// its status, so nothing recorded there (stored content, pods notified, commits pushed) is done
// twice.
package shard

import (
	"context"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// Key is the label that assigns an object to a shard: Decofiles carry it themselves, tenant cache
// users follow their Namespace's, mirrored resources their GitTarget's.
const Key = "sharding.siteops.dev/key"

// MainSelector is the selector of the main instance when shards run beside it: every object
// without the Key label.
const MainSelector = "!" + Key

// Selector tells which objects this instance reconciles. The zero Selector matches every object.
type Selector struct {
	sel  labels.Selector
	text string
}

// Parse reads a label selector as kubectl spells it ("" selects everything).
func Parse(expr string) (Selector, error) {
	if expr == "" {
		return Selector{}, nil
	}
	sel, err := labels.Parse(expr)
	if err != nil {
		return Selector{}, fmt.Errorf("--watch-label-selector %q: %w", expr, err)
	}
	return Selector{sel: sel, text: expr}, nil
}

// ForShard is the selector of shard name: the objects whose Key label is name.
func ForShard(name string) string { return Key + "=" + name }

// All reports whether the selector matches every object (no sharding).
func (s Selector) All() bool { return s.sel == nil }

// String is the selector as given.
func (s Selector) String() string { return s.text }

// Matches reports whether this instance reconciles an object with these labels.
func (s Selector) Matches(l map[string]string) bool {
	return s.sel == nil || s.sel.Matches(labels.Set(l))
}

// Owns reports whether this instance reconciles obj.
func (s Selector) Owns(obj client.Object) bool { return s.Matches(obj.GetLabels()) }

// For wraps a controller's own predicates: events of objects this instance does not reconcile
// are dropped, and an object that has just moved into or out of this shard passes even when the
// change (a label) is one the predicates ignore, so the new shard takes it over at once and the
// old one lets go of what it kept for it.
func (s Selector) For(p ...predicate.Predicate) predicate.Predicate {
	if s.All() {
		return predicate.Or(p...)
	}
	moved := predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld != nil && s.Owns(e.ObjectOld) != s.Owns(e.ObjectNew)
		},
	}
	return predicate.Or(moved, predicate.And(predicate.NewPredicateFuncs(s.Owns), predicate.Or(p...)))
}

// LabelsFunc returns the labels that place an object in a shard.
type LabelsFunc func(context.Context, client.Object) (map[string]string, error)

// Reconciler runs Inner only for objects the Selector matches. Requests for other shards'
// objects come through watches that map one kind to another (a Pod to its Decofile, an owned
// ConfigMap to its owner) and through requests queued before an object moved: they end here,
// read from the cache alone. An object not found goes to Inner, which handles deletions.
type Reconciler struct {
	// Reader reads the object, from the manager's cache.
	Reader client.Reader
	// Selector decides.
	Selector Selector
	// New returns an empty object of the reconciled kind.
	New func() client.Object
	// LabelsOf returns the labels that place an object in a shard, for kinds that follow
	// another object (a WatchRule its GitTarget); nil means the object's own labels.
	LabelsOf LabelsFunc
	// Inner is the part's reconciler.
	Inner reconcile.Reconciler
}

// Wrap returns inner unchanged without sharding, or a Reconciler around it.
func Wrap(sel Selector, reader client.Reader, newObj func() client.Object, inner reconcile.Reconciler) reconcile.Reconciler {
	return WrapFollowing(sel, reader, newObj, nil, inner)
}

// WrapFollowing is Wrap for a kind placed by the labels labelsOf returns.
func WrapFollowing(sel Selector, reader client.Reader, newObj func() client.Object, labelsOf LabelsFunc, inner reconcile.Reconciler) reconcile.Reconciler {
	if sel.All() {
		return inner
	}
	return &Reconciler{Reader: reader, Selector: sel, New: newObj, LabelsOf: labelsOf, Inner: inner}
}

// Reconcile skips the request when the object belongs to another shard.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	obj := r.New()
	err := r.Reader.Get(ctx, req.NamespacedName, obj)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return r.Inner.Reconcile(ctx, req)
		}
		return reconcile.Result{}, fmt.Errorf("read %s to find its shard: %w", req.NamespacedName, err)
	}
	l := obj.GetLabels()
	if r.LabelsOf != nil {
		if l, err = r.LabelsOf(ctx, obj); err != nil {
			return reconcile.Result{}, fmt.Errorf("find the shard of %s: %w", req.NamespacedName, err)
		}
	}
	if !r.Selector.Matches(l) {
		skipped.WithLabelValues(reflect.TypeOf(obj).Elem().Name()).Inc()
		return reconcile.Result{}, nil
	}
	return r.Inner.Reconcile(ctx, req)
}
