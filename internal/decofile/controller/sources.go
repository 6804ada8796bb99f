package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/source"
	"github.com/siteops/siteops/internal/decofile/sources"
	"github.com/siteops/siteops/internal/decofile/sources/kind"
)

// watchAnnouncers watches the objects that announce a kind's content (Flux sources), where the
// API server serves them: a change reconciles at once the Decofiles following the object. Where
// it does not, those Decofiles are polled every spec.interval.
func (r *Reconciler) watchAnnouncers(mgr ctrl.Manager, b *builder.TypedBuilder[reconcile.Request]) *builder.TypedBuilder[reconcile.Request] {
	log := mgr.GetLogger().WithName("decofile-delivery")
	for _, w := range r.sources.Watchers() {
		for _, gvk := range w.Watches() {
			if _, err := mgr.GetRESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
				log.Info("not watching a source kind the API server does not serve; its Decofiles are polled", "kind", gvk.String())
				continue
			}
			obj := &metav1.PartialObjectMetadata{}
			obj.SetGroupVersionKind(gvk)
			b = b.Watches(obj, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
				return r.following(ctx, o.GetNamespace(), w.WatchKey(gvk, o))
			}))
		}
	}
	return b
}

// indexed holds the managers whose cache has IndexSourceRef: Setup and NewPushTrigger both need
// it, and a manager refuses an index registered twice.
var indexed sync.Map // manager.Manager → struct{}

// indexSources registers IndexSourceRef with mgr's cache once.
func indexSources(ctx context.Context, mgr ctrl.Manager) error {
	if _, done := indexed.LoadOrStore(mgr, struct{}{}); done {
		return nil
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &decov1.Decofile{}, IndexSourceRef, func(o client.Object) []string {
		return sources.Describing.Keys(o.(*decov1.Decofile))
	}); err != nil {
		indexed.Delete(mgr)
		return fmt.Errorf("index Decofiles by source: %w", err)
	}
	return nil
}

// following are the Decofiles of namespace ns whose source index holds key.
func (r *Reconciler) following(ctx context.Context, ns, key string) []reconcile.Request {
	var list decov1.DecofileList
	if err := r.client.List(ctx, &list, client.InNamespace(ns), client.MatchingFields{IndexSourceRef: key}); err != nil {
		logf.FromContext(ctx).Info("could not list the Decofiles following a source; they are polled", "key", key, "error", err.Error())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, d := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: d.Namespace, Name: d.Name}})
	}
	return reqs
}

// sourceEnv is what the source kinds reach their remotes with: the kinds without a fetcher of
// their own are bounded like git (the --source-* and --decofile-max-* flags set both).
func sourceEnv(secrets client.Reader, o Options) kind.Env {
	g := o.Git
	return kind.Env{
		Reader: secrets,
		GitHub: o.GitHub, Tokens: o.Tokens, Git: g,
		Limits: g.Limits, Egress: g.Egress, Timeout: g.Timeout, Gate: g.Gate, TempDir: g.TempDir,
		FluxStorage: o.FluxStorage,
	}
}

// recordRevision records the source kind and revision of content just stored: githubCommit
// too when the revision is a commit, for clients of v0.11.
func recordRevision(next *decov1.DecofileStatus, t decov1.SourceType, revision string) {
	next.SourceType = t
	commit := ""
	if source.IsCommitSHA(revision) {
		commit = revision
	}
	next.GitHubCommit, next.ShortCommit = commit, short(commit)
	if next.Artifact == nil {
		next.Artifact = &decov1.Artifact{}
	}
	next.Artifact.Revision = revision
}

// pollInterval is how often the Decofile's reference is resolved again: spec.interval for one
// that moves (a branch or tag), never for inline content or a pinned revision.
func pollInterval(df *decov1.Decofile) time.Duration {
	if !sources.Describing.Moves(df) {
		return 0
	}
	if df.Spec.Interval != nil && df.Spec.Interval.Duration > 0 {
		// The CRD refuses less than MinInterval; a Decofile stored before that rule keeps its
		// value (validation ratcheting), so the floor is applied here too.
		return max(df.Spec.Interval.Duration, MinInterval)
	}
	return DefaultInterval
}

// takeRetrieval takes one of the MaxConcurrentRetrievals slots for a remote source's delivery
// (inline content needs none). It never waits: a worker waiting for a slot would be a worker
// that inline Decofiles and other tenants cannot have while a slow remote holds every slot.
func (r *Reconciler) takeRetrieval(df *decov1.Decofile) (release func(), ok bool) {
	if !r.sources.Remote(df) {
		return func() {}, true
	}
	select {
	case r.retrievals <- struct{}{}:
		return func() { <-r.retrievals }, true
	default:
		return nil, false
	}
}

// retrievalRetry is when a Decofile that found every retrieval slot taken looks again:
// about a second, spread so that the waiting Decofiles do not all come back at once.
func retrievalRetry() time.Duration {
	return wait.Jitter(time.Second, 1)
}
