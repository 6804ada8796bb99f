package commitrequest

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/mirror/attribution"
	"github.com/siteops/siteops/internal/mirror/fairness"
	"github.com/siteops/siteops/internal/mirror/gitwriter"
	"github.com/siteops/siteops/internal/mirror/store"
	"github.com/siteops/siteops/internal/shard"
)

// ErrTargetNotRunning says the GitTarget is unknown to the mirror or not running (yet).
var ErrTargetNotRunning = errors.New("the GitTarget is not running in the mirror")

// Closed is the outcome of closing a window.
type Closed struct {
	// Commit is the pushed commit; empty when nothing was pending.
	Commit string
	// Author is the identity the commit was authored with.
	Author gitwriter.Signature
}

// WindowCloser closes a GitTarget's open commit window at once (the mirror engine).
type WindowCloser interface {
	// CloseWindow commits what is pending for target now, with message and author (nil means
	// the committer) and request's UID in a trailer, pushes it, and returns the result.
	// ErrTargetNotRunning when the target is not running.
	CloseWindow(ctx context.Context, target types.NamespacedName, request types.UID, message string, author *gitwriter.Signature) (Closed, error)
	// FindCommit returns the commit an earlier CloseWindow pushed for request, read from the
	// branch's recent history; Commit is "" when there is none. ErrTargetNotRunning as above.
	FindCommit(ctx context.Context, target types.NamespacedName, request types.UID) (Closed, error)
}

// AuthorLookup reads command authors (the store's CommandAuthorStore).
type AuthorLookup interface {
	LookupCommandAuthor(ctx context.Context, uid types.UID) (store.CommandAuthor, bool)
}

// Reconciler processes each CommitRequest once.
type Reconciler struct {
	// Shard and TargetLabels select the requests of GitTargets in this instance's shard.
	Shard        shard.Selector
	TargetLabels shard.LabelsFunc
	Client       client.Client
	// Reader reads a request again after a conflicting status write: the API server, not the
	// cache, which may not have the write that conflicted yet. Nil reads through Client.
	Reader client.Reader
	// Authors reads the submitters recorded at admission; nil means none are (the committer
	// authors every command commit).
	Authors AuthorLookup
	// Closer closes windows.
	Closer WindowCloser
	// Identity derives git identities from users.
	Identity attribution.Identity
	// RetryAfter is the wait before retrying a request whose target is not running; 0 means 10s.
	RetryAfter time.Duration
}

// +kubebuilder:rbac:groups=mirror.siteops.dev,resources=commitrequests,verbs=get;list;watch
// +kubebuilder:rbac:groups=mirror.siteops.dev,resources=commitrequests/status,verbs=get;update;patch

// Workers is how many CommitRequests are processed at once; one namespace holds at most
// PerNamespace of them, so requests waiting on one tenant's unresponsive remote (each up to
// the close timeout) never hold back another tenant's.
const (
	Workers      = 4
	PerNamespace = Workers / 2
)

// SetupWithManager registers the controller; it runs on the leader, which owns the writers.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	const name = "mirror-commitrequest"
	return ctrl.NewControllerManagedBy(mgr).
		Named(name).
		For(&mirrorv1alpha1.CommitRequest{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: Workers}).
		// The requests of GitTargets in other shards are those shards' to process.
		Complete(shard.WrapFollowing(r.Shard, mgr.GetClient(), func() client.Object { return &mirrorv1alpha1.CommitRequest{} }, r.TargetLabels,
			&fairness.Limit{Inner: r, Controller: name, PerNamespace: PerNamespace}))
}

// attempted reports whether an earlier reconcile got as far as committing (or failing to): its
// Committed condition is set.
func attempted(cr *mirrorv1alpha1.CommitRequest) bool {
	return meta.FindStatusCondition(cr.Status.Conditions, mirrorv1alpha1.ConditionCommitted) != nil
}

// done reports whether the request was already processed (a CommitRequest is one-shot).
func done(cr *mirrorv1alpha1.CommitRequest) bool {
	c := meta.FindStatusCondition(cr.Status.Conditions, mirrorv1alpha1.ConditionCommitted)
	return c != nil && c.Status == metav1.ConditionTrue
}

// Reconcile commits the request's target window with the request's message and author.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	var cr mirrorv1alpha1.CommitRequest
	if err := r.Client.Get(ctx, req.NamespacedName, &cr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if done(&cr) {
		return ctrl.Result{}, nil
	}
	if ns := cr.Spec.TargetRef.Namespace; ns != "" && ns != cr.Namespace {
		return ctrl.Result{}, r.setStatus(ctx, &cr, func(s *mirrorv1alpha1.CommitRequestStatus) {
			r.cond(&cr, s, mirrorv1alpha1.ConditionCommitted, metav1.ConditionFalse, mirrorv1alpha1.ReasonTargetNotFound,
				fmt.Sprintf("targetRef.namespace %q is not the request's namespace %q: a CommitRequest may only close windows of GitTargets in its own namespace", ns, cr.Namespace))
		})
	}
	target := types.NamespacedName{Namespace: cr.Namespace, Name: cr.Spec.TargetRef.Name}

	var author *gitwriter.Signature
	attributed := metav1.ConditionFalse
	reason := mirrorv1alpha1.ReasonCommitterFallback
	msg := "no submitter was recorded at admission (the CommitRequest webhook is not configured or was unreachable): the committer authors the commit"
	if r.Authors != nil {
		if a, ok := r.Authors.LookupCommandAuthor(ctx, cr.UID); ok {
			sig := r.Identity.CommandSignature(a)
			author = &sig
			attributed, reason = metav1.ConditionTrue, mirrorv1alpha1.ReasonCommandAuthor
			msg = fmt.Sprintf("authored by the submitter %s", a.Author)
		}
	}
	setAuthor := func(s *mirrorv1alpha1.CommitRequestStatus) {
		r.cond(&cr, s, mirrorv1alpha1.ConditionAuthorAttributed, attributed, reason, msg)
	}

	retryAfter := r.RetryAfter
	if retryAfter <= 0 {
		retryAfter = 10 * time.Second
	}
	notRunning := func(err error) (ctrl.Result, error) {
		return ctrl.Result{RequeueAfter: retryAfter}, r.setStatus(ctx, &cr, func(s *mirrorv1alpha1.CommitRequestStatus) {
			setAuthor(s)
			r.cond(&cr, s, mirrorv1alpha1.ConditionCommitted, metav1.ConditionFalse, mirrorv1alpha1.ReasonTargetNotFound,
				fmt.Sprintf("GitTarget %s is not running in the mirror; retrying: %v", target.Name, err))
		})
	}

	var res Closed
	var err error
	if attempted(&cr) {
		// An earlier attempt may have pushed and lost its outcome (its leader went away before
		// the status write, or the wait timed out while the push went on): its commit names the
		// request in a trailer, and is reported instead of closing the window again, which
		// would find nothing pending.
		res, err = r.Closer.FindCommit(ctx, target, cr.UID)
		switch {
		case errors.Is(err, ErrTargetNotRunning):
			return notRunning(err)
		case err != nil:
			return ctrl.Result{}, fmt.Errorf("look for the commit of an earlier attempt on GitTarget %s: %w", target, err)
		case res.Commit != "":
			log.Info("found the commit an earlier attempt pushed", "commit", res.Commit)
		}
	}
	if res.Commit == "" {
		// Recorded before the push, so that a retry after a lost outcome looks for the commit.
		if err := r.setStatus(ctx, &cr, func(s *mirrorv1alpha1.CommitRequestStatus) {
			setAuthor(s)
			r.cond(&cr, s, mirrorv1alpha1.ConditionCommitted, metav1.ConditionUnknown, mirrorv1alpha1.ReasonCommitting,
				"committing the target's pending changes and pushing them")
		}); err != nil {
			return ctrl.Result{}, fmt.Errorf("record that the request is being committed: %w", err)
		}
		res, err = r.Closer.CloseWindow(ctx, target, cr.UID, cr.Spec.Message, author)
	}
	switch {
	case errors.Is(err, ErrTargetNotRunning):
		return notRunning(err)
	case err != nil:
		if serr := r.setStatus(ctx, &cr, func(s *mirrorv1alpha1.CommitRequestStatus) {
			setAuthor(s)
			r.cond(&cr, s, mirrorv1alpha1.ConditionCommitted, metav1.ConditionFalse, mirrorv1alpha1.ReasonCommitFailed,
				fmt.Sprintf("commit or push failed; retrying: %v", err))
		}); serr != nil {
			log.Error(serr, "record CommitRequest status")
		}
		return ctrl.Result{}, fmt.Errorf("close the window of GitTarget %s: %w", target, err)
	}
	return ctrl.Result{}, r.setStatus(ctx, &cr, func(s *mirrorv1alpha1.CommitRequestStatus) {
		setAuthor(s)
		s.Commit = res.Commit
		s.Author = fmt.Sprintf("%s <%s>", res.Author.Name, res.Author.Email)
		now := metav1.Now()
		s.CompletionTime = &now
		if res.Commit == "" {
			r.cond(&cr, s, mirrorv1alpha1.ConditionCommitted, metav1.ConditionTrue, mirrorv1alpha1.ReasonNothingPending,
				"the target's window held no change made by this author (no empty commit is made; changes of others, or with no recorded author, are committed as their own, never credited to the submitter)")
		} else {
			r.cond(&cr, s, mirrorv1alpha1.ConditionCommitted, metav1.ConditionTrue, mirrorv1alpha1.ReasonPushed,
				"commit "+res.Commit+" pushed")
		}
	})
}

// cond sets a condition and mirrors Committed into the kstatus Ready condition.
func (r *Reconciler) cond(cr *mirrorv1alpha1.CommitRequest, s *mirrorv1alpha1.CommitRequestStatus, typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: cr.Generation})
	if typ == mirrorv1alpha1.ConditionCommitted {
		meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: mirrorv1alpha1.ConditionReady, Status: status, Reason: reason, Message: msg, ObservedGeneration: cr.Generation})
	}
}

// setStatus patches the status with optimistic locking, retrying on conflict from the API
// server's copy, and writes nothing when nothing changed or the request was replaced by another
// of its name.
func (r *Reconciler) setStatus(ctx context.Context, cr *mirrorv1alpha1.CommitRequest, mutate func(*mirrorv1alpha1.CommitRequestStatus)) error {
	first := true
	uid := cr.UID
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			reader := r.Reader
			if reader == nil {
				reader = r.Client
			}
			if err := reader.Get(ctx, client.ObjectKeyFromObject(cr), cr); err != nil {
				return client.IgnoreNotFound(err)
			}
			if cr.UID != uid {
				return nil // another request of the same name: not this outcome's
			}
		}
		first = false
		old := cr.DeepCopy()
		mutate(&cr.Status)
		cr.Status.ObservedGeneration = cr.Generation
		if equalStatus(old.Status, cr.Status) {
			return nil
		}
		err := r.Client.Status().Patch(ctx, cr, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{}))
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
}

// equalStatus compares statuses ignoring condition transition times.
func equalStatus(a, b mirrorv1alpha1.CommitRequestStatus) bool {
	if a.ObservedGeneration != b.ObservedGeneration || a.Commit != b.Commit || a.Author != b.Author ||
		(a.CompletionTime == nil) != (b.CompletionTime == nil) || len(a.Conditions) != len(b.Conditions) {
		return false
	}
	for _, c := range a.Conditions {
		d := meta.FindStatusCondition(b.Conditions, c.Type)
		if d == nil || d.Status != c.Status || d.Reason != c.Reason || d.Message != c.Message || d.ObservedGeneration != c.ObservedGeneration {
			return false
		}
	}
	return true
}
