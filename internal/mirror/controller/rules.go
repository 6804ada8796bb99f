package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/egress"
	"github.com/siteops/siteops/internal/shard"
)

// RuleReconciler records the status of WatchRules and ClusterWatchRules: what they resolve to,
// what is excluded, and whether their target exists.
type RuleReconciler struct {
	// Shard selects the rules whose GitTarget is in this instance's shard.
	Shard     shard.Selector
	Client    client.Client
	Discovery *Discovery
	Recorder  events.EventRecorder
	// Cluster selects ClusterWatchRules instead of WatchRules.
	Cluster bool
}

// SetupWithManager registers the controller.
func (r *RuleReconciler) SetupWithManager(mgr ctrl.Manager) error {
	var obj client.Object = &mirrorv1alpha1.WatchRule{}
	name := "mirror-watchrule"
	if r.Cluster {
		obj, name = &mirrorv1alpha1.ClusterWatchRule{}, "mirror-clusterwatchrule"
	}
	return ctrl.NewControllerManagedBy(mgr).Named(name).
		For(obj, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&mirrorv1alpha1.GitTarget{}, handler.EnqueueRequestsFromMapFunc(r.rulesOfTarget), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// The rules of GitTargets in other shards are those shards' to check.
		Complete(shard.WrapFollowing(r.Shard, mgr.GetClient(), func() client.Object { return obj.DeepCopyObject().(client.Object) }, TargetLabels(mgr.GetClient()), r))
}

// TargetLabels returns the labels of the GitTarget a WatchRule, ClusterWatchRule or
// CommitRequest names: they follow their target's shard. A missing target gives none (the main
// instance reports it).
func TargetLabels(c client.Reader) shard.LabelsFunc {
	return func(ctx context.Context, o client.Object) (map[string]string, error) {
		var key types.NamespacedName
		if cr, ok := o.(*mirrorv1alpha1.CommitRequest); ok {
			key = types.NamespacedName{Namespace: cr.Namespace, Name: cr.Spec.TargetRef.Name}
		} else if reqs := ruleTarget(ctx, o); len(reqs) == 1 {
			key = reqs[0].NamespacedName
		} else {
			return nil, nil
		}
		var target mirrorv1alpha1.GitTarget
		if err := c.Get(ctx, key, &target); err != nil {
			return nil, client.IgnoreNotFound(err)
		}
		return target.Labels, nil
	}
}

// rulesOfTarget lists the rules naming target: its creation, deletion or a spec change (its
// spec.secrets decides whether Secrets resolve) shows in their status at once, not at the resync.
func (r *RuleReconciler) rulesOfTarget(ctx context.Context, target client.Object) []reconcile.Request {
	named := func(ref mirrorv1alpha1.TargetReference, ruleNamespace string) bool {
		ns := ref.Namespace
		if ns == "" {
			ns = ruleNamespace
		}
		return ref.Name == target.GetName() && ns == target.GetNamespace()
	}
	var reqs []reconcile.Request
	if r.Cluster {
		var list mirrorv1alpha1.ClusterWatchRuleList
		if err := r.Client.List(ctx, &list); err != nil {
			return nil
		}
		for _, rule := range list.Items {
			if named(rule.Spec.TargetRef, "") {
				reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: rule.Name}})
			}
		}
		return reqs
	}
	var list mirrorv1alpha1.WatchRuleList
	if err := r.Client.List(ctx, &list, client.InNamespace(target.GetNamespace())); err != nil {
		return nil
	}
	for _, rule := range list.Items {
		if named(rule.Spec.TargetRef, rule.Namespace) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&rule)})
		}
	}
	return reqs
}

// Reconcile resolves one rule and records its status.
func (r *RuleReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var (
		obj        client.Object
		spec       []mirrorv1alpha1.ResourceRule
		status     *mirrorv1alpha1.WatchRuleStatus
		targetKey  types.NamespacedName
		namespaced = !r.Cluster
		old        client.Object
		suspended  bool
	)
	if r.Cluster {
		rule := &mirrorv1alpha1.ClusterWatchRule{}
		if err := r.Client.Get(ctx, req.NamespacedName, rule); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		obj, old, spec, status = rule, rule.DeepCopy(), rule.Spec.Rules, &rule.Status
		targetKey = types.NamespacedName{Namespace: rule.Spec.TargetRef.Namespace, Name: rule.Spec.TargetRef.Name}
	} else {
		rule := &mirrorv1alpha1.WatchRule{}
		if err := r.Client.Get(ctx, req.NamespacedName, rule); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
		obj, old, spec, status = rule, rule.DeepCopy(), rule.Spec.Rules, &rule.Status
		suspended = rule.Spec.Suspend
		targetKey = types.NamespacedName{Namespace: rule.Spec.TargetRef.Namespace, Name: rule.Spec.TargetRef.Name}
		if targetKey.Namespace == "" {
			targetKey.Namespace = rule.Namespace
		}
	}
	prevStatus := *status.DeepCopy()
	ready := metav1.Condition{Type: mirrorv1alpha1.ConditionReady, ObservedGeneration: obj.GetGeneration()}
	var target mirrorv1alpha1.GitTarget
	terr := r.Client.Get(ctx, targetKey, &target)
	// Secrets resolve like any resource for a target that writes them encrypted.
	secrets := terr == nil && target.Spec.Secrets != nil && target.Spec.Secrets.Mode == mirrorv1alpha1.SecretsEncrypt
	res, rerr := r.Discovery.ResolveFor(spec, namespaced, secrets)
	status.ObservedGeneration = obj.GetGeneration()
	status.Resources = nil
	for _, rs := range res.Resources {
		status.Resources = append(status.Resources, rs.GVR.GroupResource().String()+"/"+rs.GVR.Version)
	}
	status.Excluded = res.Excluded
	switch {
	case !r.Cluster && targetKey.Namespace != obj.GetNamespace():
		ready.Status, ready.Reason = metav1.ConditionFalse, "CrossNamespaceNotAllowed"
		ready.Message = fmt.Sprintf("a WatchRule may only write to a GitTarget in its own namespace %s", obj.GetNamespace())
	case apierrors.IsNotFound(terr):
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "TargetNotFound", fmt.Sprintf("GitTarget %s not found", targetKey)
	case terr != nil:
		return ctrl.Result{}, terr
	case rerr != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "NoResources", rerr.Error()
	case suspended:
		ready.Status, ready.Reason = metav1.ConditionFalse, ReasonSuspended
		ready.Message = "the rule's watches are stopped: spec.suspend is set; its files and cursors are kept until it is unset"
	default:
		ready.Status, ready.Reason = metav1.ConditionTrue, "Resolved"
		ready.Message = fmt.Sprintf("watching %s", strings.Join(status.Resources, ", "))
	}
	prev := meta.FindStatusCondition(prevStatus.Conditions, mirrorv1alpha1.ConditionReady)
	meta.SetStatusCondition(&status.Conditions, ready)
	if equality.Semantic.DeepEqual(prevStatus, *status) {
		return ctrl.Result{RequeueAfter: resyncInterval}, nil
	}
	if r.Recorder != nil && (prev == nil || prev.Reason != ready.Reason) {
		r.Recorder.Eventf(obj, nil, eventType(ready), ready.Reason, "Resolve", "%s", ready.Message)
	}
	if err := r.Client.Status().Patch(ctx, obj, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{})); err != nil {
		return requeueOnConflict(ctrl.Result{}, client.IgnoreNotFound(err))
	}
	return ctrl.Result{RequeueAfter: resyncInterval}, nil
}

// ProviderReconciler records whether a GitProvider's credentials and signing key load and its URL
// is allowed.
type ProviderReconciler struct {
	// Shard selects the providers this instance checks, by their own labels.
	Shard     shard.Selector
	Client    client.Client
	APIReader client.Reader
	Recorder  events.EventRecorder
	// Egress is the mirror's URL policy; nil allows https and ssh to public addresses only.
	Egress *egress.Policy
}

// SetupWithManager registers the controller.
func (r *ProviderReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named("mirror-gitprovider").
		For(&mirrorv1alpha1.GitProvider{}, builder.WithPredicates(r.Shard.For(predicate.GenerationChangedPredicate{}))).
		Complete(shard.Wrap(r.Shard, mgr.GetClient(), func() client.Object { return &mirrorv1alpha1.GitProvider{} }, r))
}

// Reconcile checks the provider's credentials and records Ready.
func (r *ProviderReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var p mirrorv1alpha1.GitProvider
	if err := r.Client.Get(ctx, req.NamespacedName, &p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	old := p.DeepCopy()
	ready := metav1.Condition{Type: mirrorv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "CredentialsLoaded", Message: "credentials are usable", ObservedGeneration: p.Generation}
	if _, _, err := loadCredentials(ctx, r.APIReader, &p); err != nil {
		var problem *targetProblem
		if !errors.As(err, &problem) {
			return ctrl.Result{}, err
		}
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, problem.reason, problem.message
	}
	if _, _, err := loadSigner(ctx, r.APIReader, &p); err != nil {
		var problem *targetProblem
		if !errors.As(err, &problem) {
			return ctrl.Result{}, err
		}
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, problem.reason, problem.message
	}
	if problem := remoteProblem(r.Egress, &p); problem != nil {
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, problem.reason, problem.message
	}
	for _, g := range p.Spec.AllowedBranches {
		if _, err := matchGlob(g); err != nil {
			ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "InvalidBranchGlob", fmt.Sprintf("allowedBranches %q: %v", g, err)
		}
	}
	p.Status.ObservedGeneration = p.Generation
	prev := meta.FindStatusCondition(old.Status.Conditions, mirrorv1alpha1.ConditionReady)
	meta.SetStatusCondition(&p.Status.Conditions, ready)
	if equality.Semantic.DeepEqual(old.Status, p.Status) {
		return ctrl.Result{RequeueAfter: resyncInterval}, nil
	}
	if r.Recorder != nil && (prev == nil || prev.Reason != ready.Reason) {
		r.Recorder.Eventf(&p, nil, eventType(ready), ready.Reason, "Check", "%s", ready.Message)
	}
	if err := r.Client.Status().Patch(ctx, &p, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{})); err != nil {
		return requeueOnConflict(ctrl.Result{}, client.IgnoreNotFound(err))
	}
	return ctrl.Result{RequeueAfter: resyncInterval}, nil
}
