// Package controller is the Decofile delivery controller: it retrieves a Decofile's blocks,
// merges and encodes them, writes the ConfigMap decofile-<name> when the content changed, and
// records the result in a kstatus-compliant status (observedGeneration, Ready, Reconciling,
// Stalled). It never notifies pods: the rollout controller reacts to status.contentHash.
//
// The ConfigMap lives in the tenant's namespace and the tenant may write it; the status may not
// be written by the tenant. So whether the ConfigMap still holds what was stored is decided from
// status.storedHash, never from the ConfigMap's own annotations, and anything else found there is
// restored with a Warning Event.
//
// Status ownership: this controller alone writes the stored content (ConfigMap, S3 object) and
// the status fields that describe it, Ready, Reconciling and Stalled; the rollout controller
// alone writes notifiedHash, rollout, lastGood, history and PodsNotified, and asks this one to
// store the last good content for a rollback (Decofile.RollingBack). Both write through
// StatusWriter: a status update without the spec, carrying the Decofile's UID and
// resourceVersion as preconditions, that copies only the writer's own fields. On a conflict the
// write is retried on a fresh read with the same decision, which is sound because no other
// writer touches those fields: the conflicting write was the other controller's. Flux's patch
// helper was weighed: it diffs and reads back the whole object, inline content included
// (megabytes per write). Server-side apply with one field manager per controller would also
// keep the owners apart, at the cost of managedFields on every Decofile; the update above does
// it with the status alone on the wire.
package controller

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/lastwrite"
	"github.com/siteops/siteops/internal/decofile/source"
	"github.com/siteops/siteops/internal/decofile/sources"
	"github.com/siteops/siteops/internal/shard"
	"github.com/siteops/siteops/internal/workload"
)

// Annotations the controller puts on the ConfigMap, for people and tools reading it. They are
// information only: the ConfigMap is writable by the namespace's users, so the controller
// decides whether it is intact from status.storedHash.
const (
	// AnnotationContentHash is the SHA-256 of the merged JSON held by the ConfigMap.
	AnnotationContentHash = "deco.sites/content-hash"
	// AnnotationStoredHash is the SHA-256 of the stored value (decofile.json or decofile.bin).
	AnnotationStoredHash = "deco.sites/stored-hash"
)

// Condition reasons set by this controller besides the ones in the API package.
const (
	// ReasonS3NotConfigured: spec.target is s3 but the operator has no S3 target.
	ReasonS3NotConfigured = "S3TargetNotConfigured"
	// ReasonConfigMapConflict: a ConfigMap of that name exists and belongs to something else.
	ReasonConfigMapConflict = "ConfigMapConflict"
	// ReasonStoreFailed: writing the ConfigMap failed; retried with backoff.
	ReasonStoreFailed = "StoreFailed"
	// ReasonConfigMapAdopted (Normal Event): a ConfigMap the operator had not written (one left
	// by the published operator, v0.11) already held the content and was taken over as it is.
	ReasonConfigMapAdopted = "ConfigMapAdopted"
	// ReasonConfigMapRestored (Warning Event): the ConfigMap did not hold what the operator
	// stored (changed outside the operator) and was rewritten.
	ReasonConfigMapRestored = "ConfigMapRestored"
	// ReasonSuspended (Normal Event): spec.suspend is set, so nothing was read or stored.
	ReasonSuspended = "Suspended"
	// ReasonReloadTokenRecreated (Warning Event): the reload Secret was gone and was recreated
	// with a new token; the workloads using it were restarted so their pods get it.
	ReasonReloadTokenRecreated = "ReloadTokenRecreated"
)

// AnnotationRestartedAt on a pod template restarts its pods, as `kubectl rollout restart` does;
// set when the reload token had to be replaced.
const AnnotationRestartedAt = "kubectl.kubernetes.io/restartedAt"

// DefaultInterval is how often a branch or tag is re-resolved when spec.interval is unset.
const DefaultInterval = time.Minute

// MinInterval is the shortest poll interval, as the CRD's rule on spec.interval says.
const MinInterval = 10 * time.Second

// Defaults of Options.
const (
	// DefaultMaxConcurrentReconciles: a delivery mostly waits on the API server, and an inline
	// Decofile holds no more than the API server stores.
	DefaultMaxConcurrentReconciles = 8
	// DefaultMaxConcurrentRetrievals: each retrieval may hold up to the source's content limit
	// (64 MiB by default), so fewer of them run at once than deliveries.
	DefaultMaxConcurrentRetrievals = 4
)

// Options configures the delivery controller.
type Options struct {
	// Shard selects the Decofiles this controller reconciles.
	Shard shard.Selector
	// GitHub fetches github sources (base URLs, limits, HTTP client).
	GitHub *source.GitHub
	// Git fetches git sources.
	Git *source.Git
	// Tokens decides which GitHub token a Decofile may use.
	Tokens source.TokenPolicy
	// FluxStorage is the base URL of Flux source-controller's artifact storage (sourceRef).
	FluxStorage string
	// Encode sets the compression threshold and the ConfigMap limit.
	Encode encode.Options
	// MaxConcurrentReconciles is how many Decofiles are processed at once; default
	// DefaultMaxConcurrentReconciles.
	MaxConcurrentReconciles int
	// MaxConcurrentRetrievals is how many of them may retrieve and hold a remote's (github, git)
	// content at once; default DefaultMaxConcurrentRetrievals.
	MaxConcurrentRetrievals int
	// S3 stores s3-target Decofiles; nil means the s3 target is not configured.
	S3 ObjectStore
	// Push, when set, reconciles the Decofiles a push event names at once (NewPushTrigger).
	Push *PushTrigger
	// Rollout, when set, records the rollout of new content no pod has to hear about in the
	// delivery's own status write.
	Rollout RolloutSettler
	// MemoryBytes is what deliveries may hold at once while they merge and encode content:
	// half for the content, half for the compressors' state, each with a per-namespace share
	// of half; default DeliveryMemory(GoMemoryLimit()).
	MemoryBytes int64
	// Bounds limit a Decofile's JSON (members, nesting); the merged size defaults to the
	// content limit.
	Bounds encode.Bounds
}

// Reconciler delivers Decofiles into ConfigMaps.
type Reconciler struct {
	client   client.Client // writes
	reader   client.Reader // uncached reads: fresh Decofiles; ConfigMaps and Secrets are not cached in full
	status   *StatusWriter
	recorder events.EventRecorder
	opts     Options
	now      func() time.Time
	// rejected remembers, per Decofile, the commit whose content failed for good at a
	// generation, so polling does not download and report the same bad commit again.
	rejected sync.Map // types.NamespacedName → rejectedCommit
	// written remembers, per Decofile, this controller's last status write, so read asks the
	// API server for a version that has it.
	written lastwrite.Tracker
	// workloads lists the workloads injected with a Decofile, through reader.
	workloads *workload.Lister
	// sources resolves and downloads each kind of spec.source.
	sources *sources.Registry
	// retrievals holds a slot per delivery from a remote source (MaxConcurrentRetrievals).
	retrievals chan struct{}
	// memory bounds the content and compressors of the deliveries in flight (MemoryBytes).
	memory memory
}

type rejectedCommit struct {
	generation int64
	sha        string
}

// +kubebuilder:rbac:groups=deco.sites,resources=decofiles,verbs=get;list;watch
// +kubebuilder:rbac:groups=deco.sites,resources=decofiles/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets,verbs=list;patch
// +kubebuilder:rbac:groups=serving.knative.dev,resources=services,verbs=list;patch

// Setup registers the delivery controller with mgr.
func Setup(mgr ctrl.Manager, o Options) error {
	if o.GitHub == nil {
		o.GitHub = &source.GitHub{}
	}
	if o.Git == nil {
		o.Git = &source.Git{}
	}
	if o.Tokens.Namespaces == nil {
		o.Tokens.Namespaces = source.NamespaceAnnotations(mgr.GetAPIReader()) // grants of the fallback token
	}
	if o.GitHub.Observe == nil {
		o.GitHub.Observe = func(kind string, code int) {
			githubRequestsTotal.WithLabelValues(kind, strconv.Itoa(code)).Inc()
		}
	}
	if app, ok := o.Tokens.App.(*source.GitHubApp); ok && app.Observe == nil {
		app.Observe = o.GitHub.Observe // kinds app-installation and app-token
	}
	if o.MaxConcurrentReconciles <= 0 {
		o.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	if o.MaxConcurrentRetrievals <= 0 {
		o.MaxConcurrentRetrievals = DefaultMaxConcurrentRetrievals
	}
	if o.MemoryBytes <= 0 {
		o.MemoryBytes = DeliveryMemory(GoMemoryLimit())
	}
	status, err := NewStatusWriter(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return err
	}
	r := &Reconciler{
		client:     mgr.GetClient(),
		reader:     mgr.GetAPIReader(),
		workloads:  &workload.Lister{Reader: mgr.GetAPIReader()},
		status:     status,
		recorder:   mgr.GetEventRecorder("siteops-decofile"),
		opts:       o,
		now:        time.Now,
		sources:    sources.New(sourceEnv(mgr.GetAPIReader(), o)),
		retrievals: make(chan struct{}, o.MaxConcurrentRetrievals),
		memory:     newMemory(o.MemoryBytes),
	}
	deletedOnly := predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	notCreated := predicate.Funcs{CreateFunc: func(event.CreateEvent) bool { return false }}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("decofile-delivery").
		// Only spec changes (generation) and annotation changes (a forced refresh) start a
		// reconcile: this controller's own status writes, and the rollout controller's, do not.
		// A rollback's request to store the last good content again (Decofile.RollingBack) too,
		// and the rollout's writes that change what Ready says (the pods confirmed the content).
		For(&decov1.Decofile{}, builder.WithPredicates(o.Shard.For(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, rollbackRequested, readinessChanged))).
		// Metadata only: the manager must not cache every ConfigMap and Secret of the cluster.
		// A changed or deleted ConfigMap is checked and restored; a deleted reload Secret is recreated.
		// A created one is not: it is this controller's own write (or, at start, one whose
		// Decofile is queued anyway), and looking again would double the requests per Decofile.
		Owns(&corev1.ConfigMap{}, builder.OnlyMetadata, builder.WithPredicates(notCreated)).
		Owns(&corev1.Secret{}, builder.OnlyMetadata, builder.WithPredicates(deletedOnly)).
		// A Decofile whose deploymentId is held by another is looked at again when that one
		// goes away or changes its deploymentId.
		Watches(&decov1.Decofile{}, handler.EnqueueRequestsFromMapFunc(r.sharingDeploymentID),
			builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: o.MaxConcurrentReconciles})
	if o.Push != nil {
		// Push events: the Decofiles following the pushed ref, found through the source index.
		b = b.WatchesRawSource(o.Push.source())
	}
	if err := indexSources(context.Background(), mgr); err != nil {
		return err
	}
	b = r.watchAnnouncers(mgr, b)
	return b.Complete(shard.Wrap(o.Shard, mgr.GetClient(), func() client.Object { return &decov1.Decofile{} }, r))
}

// rollbackRequested lets through the update that asks this controller to store the last good
// content again for a progressive rollout's rollback.
var rollbackRequested = decofileUpdates(func(o, n *decov1.Decofile) bool { return n.RollingBack() && !o.RollingBack() })

// decofileUpdates lets through the Decofile updates for which changed(old, new) is true, and
// no create, delete or generic event.
func decofileUpdates(changed func(o, n *decov1.Decofile) bool) predicate.Funcs {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*decov1.Decofile)
			n, ok2 := e.ObjectNew.(*decov1.Decofile)
			return ok1 && ok2 && changed(o, n)
		},
	}
}

// outcome is what one reconcile decided, before it is recorded in status.
type outcome struct {
	reason    string // condition reason
	message   string
	err       error // failure, nil on success
	transient bool
	changed   bool // the ConfigMap was written
	// known: the resolved commit already failed for good at this generation; its condition
	// stands and nothing is written or reported again.
	known bool
	// busy: every retrieval slot was taken, so nothing was read; the Decofile is looked at
	// again shortly, without a status write.
	busy bool
	// commit is the resolved revision (kinds with revisions), also when delivery failed.
	commit string
	// restored: the ConfigMap held something the operator did not store and was rewritten.
	restored bool
	// adopted: an existing ConfigMap already held the content and was taken over unchanged.
	adopted bool
}

// Reconcile brings one Decofile's ConfigMap and status up to date.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	var df decov1.Decofile
	if err := r.read(ctx, req.NamespacedName, &df); err != nil {
		if apierrors.IsNotFound(err) {
			r.written.Forget(req.NamespacedName)
			r.rejected.Delete(req.NamespacedName)
			rawBytes.DeleteLabelValues(req.Namespace, req.Name)
			storedBytes.DeleteLabelValues(req.Namespace, req.Name)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("get Decofile %s: %w", req, err)
	}
	if df.DeletionTimestamp != nil {
		return ctrl.Result{}, nil
	}
	if df.Spec.Suspend {
		// Nothing is read, stored or restored until it is resumed; the resume's spec change
		// reconciles it again.
		r.recorder.Eventf(&df, nil, corev1.EventTypeNormal, ReasonSuspended, "Deliver", "delivery is suspended: spec.suspend is set")
		log.V(1).Info("suspended")
		return ctrl.Result{}, nil
	}
	supported := df.TargetOrDefault().Supported()
	if supported {
		if err := r.ensureReloadSecret(ctx, &df); err != nil {
			return ctrl.Result{}, err
		}
	}

	next := df.Status.DeepCopy()
	next.ObservedGeneration = df.Generation
	// A requested reconcile (deco.sites/reconcile-requested-at) is handled by this one,
	// whatever its outcome: the source is re-resolved below.
	requested := df.Annotations[decov1.AnnotationReconcileRequestedAt]
	if requested != "" {
		next.LastHandledReconcileAt = requested
	}
	var out outcome
	if !supported {
		// Another operator serves this target: nothing is fetched, written or deleted.
		out = notSupported(&df)
	} else if holder, err := r.deploymentIDHolder(ctx, &df); err != nil {
		out = outcome{reason: ReasonStoreFailed, err: err, transient: true}
	} else if holder != nil {
		out = conflict(&df, holder)
	} else if df.RollingBack() {
		out = r.restoreLastGood(ctx, &df, next)
	} else {
		out = r.deliver(ctx, &df, next)
	}
	if out.busy {
		reconcilesTotal.WithLabelValues("waiting").Inc()
		return ctrl.Result{RequeueAfter: retrievalRetry()}, nil
	}
	if out.known {
		if requested != "" && requested != df.Status.LastHandledReconcileAt {
			handled := df.Status.DeepCopy()
			handled.LastHandledReconcileAt = requested
			if err := r.patchStatus(ctx, &df, handled, nil); err != nil {
				return ctrl.Result{}, err
			}
		}
		reconcilesTotal.WithLabelValues("unchanged").Inc()
		return ctrl.Result{RequeueAfter: pollInterval(&df)}, nil
	}
	switch {
	case out.err == nil:
		r.rejected.Delete(req.NamespacedName)
	case !out.transient && out.commit != "":
		r.rejected.Store(req.NamespacedName, rejectedCommit{generation: df.Generation, sha: out.commit})
	}

	status := metav1.ConditionTrue
	if out.err != nil {
		status = metav1.ConditionFalse
		out.message = out.err.Error()
	}
	meta.SetStatusCondition(&next.Conditions, metav1.Condition{
		Type: decov1.ConditionReady, Status: status, Reason: out.reason, Message: out.message, ObservedGeneration: df.Generation,
	})
	setKstatus(next, out, df.Generation)
	var settle func(*decov1.Decofile) bool
	if out.err == nil {
		settle = r.settleRollout(ctx, &df, next)
	}
	if err := r.patchStatus(ctx, &df, next, settle); err != nil {
		return ctrl.Result{}, err
	}

	switch {
	case out.err != nil:
		reconcilesTotal.WithLabelValues(out.reason).Inc()
		if out.reason != decov1.ReasonRolledBack && out.reason != decov1.ReasonRollbackFailed {
			// A rollback's Event is the rollout controller's, which ends it knowing the step,
			// the pods and which of them took the content back: one Event (and alert) each.
			r.recorder.Eventf(&df, nil, corev1.EventTypeWarning, out.reason, "Deliver", "%s", truncate(out.message, 1000))
		}
		log.Info("Decofile not delivered", "reason", out.reason, "error", out.message, "transient", out.transient)
		if out.transient {
			// Backoff comes from the workqueue's rate limiter.
			return ctrl.Result{}, fmt.Errorf("deliver Decofile %s: %w", req, out.err)
		}
	case out.restored:
		reconcilesTotal.WithLabelValues("restored").Inc()
		r.recorder.Eventf(&df, nil, corev1.EventTypeWarning, ReasonConfigMapRestored, "Deliver",
			"ConfigMap %s did not hold the content the operator stored (changed outside the operator); restored it: %s", next.ConfigMapName, out.message)
		log.Info("Decofile ConfigMap restored", "configMap", next.ConfigMapName)
	case out.adopted:
		reconcilesTotal.WithLabelValues("adopted").Inc()
		r.recorder.Eventf(&df, nil, corev1.EventTypeNormal, ReasonConfigMapAdopted, "Deliver",
			"ConfigMap %s already held this content (%s, timestamp %d): kept its data and took it over", next.ConfigMapName, keyOf(next.Format), next.Timestamp)
		log.Info("Decofile ConfigMap adopted", "configMap", next.ConfigMapName, "format", next.Format)
	case out.changed:
		reconcilesTotal.WithLabelValues("stored").Inc()
		r.recorder.Eventf(&df, nil, corev1.EventTypeNormal, "Stored", "Deliver", "%s", out.message)
		log.Info("Decofile stored", "configMap", next.ConfigMapName, "format", next.Format, "rawBytes", next.RawBytes, "storedBytes", next.StoredBytes, "commit", next.GitHubCommit)
	default:
		reconcilesTotal.WithLabelValues("unchanged").Inc()
	}
	if (out.err == nil || !out.transient) && supported {
		if every := pollInterval(&df); every > 0 {
			return ctrl.Result{RequeueAfter: every}, nil
		}
	}
	if out.reason == source.ReasonCredentials {
		// Referenced Secrets are not watched: look again for one created or fixed later.
		return ctrl.Result{RequeueAfter: DefaultInterval}, nil
	}
	return ctrl.Result{}, nil
}
