// Package rollout tells running pods about a Decofile's new content and records whether they all
// confirmed it. It is its own controller, beside the one that stores the content: it acts when a
// Decofile is Ready and its status.contentHash differs from status.notifiedHash (the last hash
// every pod confirmed), so a failed rollout is retried, with backoff, until it succeeds.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/budget"
	decofilecontroller "github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/decofile/lastwrite"
	"github.com/siteops/siteops/internal/decofile/notify"
	"github.com/siteops/siteops/internal/shard"
)

// Defaults of Options.
const (
	DefaultRetryBase             = 5 * time.Second
	DefaultRetryMax              = 5 * time.Minute
	DefaultMaxConcurrentRollouts = 4
	// DefaultMaxConcurrentLoads is how many stored contents are decoded at the same time.
	DefaultMaxConcurrentLoads = 2
	// notYetStoredDelay is how soon to look again when the store lags the status.
	notYetStoredDelay = time.Second
)

// Options configures the rollout controller.
type Options struct {
	// Shard selects the Decofiles this controller rolls out.
	Shard shard.Selector
	// Notify bounds each rollout (concurrency, timeouts, attempts).
	Notify notify.Config
	// Protocol is push (default) or long-poll.
	Protocol notify.Protocol
	// RetryBase is the wait before retrying a failed rollout; it doubles per failure up to RetryMax.
	RetryBase time.Duration
	RetryMax  time.Duration
	// MaxConcurrentRollouts is how many Decofiles the controller decides about at the same time.
	// Rollouts themselves run beside these workers, one per Decofile (see runners.go).
	MaxConcurrentRollouts int
	// MaxContentBytes bounds the decoded content one load may hold (--decofile-max-content-bytes);
	// the size recorded in status bounds it tighter.
	MaxContentBytes int64
	// MaxConcurrentLoads is how many stored contents are decoded at the same time.
	MaxConcurrentLoads int
	// MemoryBytes bounds the content all running push rollouts hold together (default three
	// times MaxContentBytes); one namespace's rollouts hold a third of it, or one content larger
	// than that alone.
	MemoryBytes int64
	// Loaders read the stored content per target; configmap is always available.
	Loaders map[decov1alpha1.TargetType]Loader
}

// Reconciler runs rollouts. Create it with Setup.
type Reconciler struct {
	client   client.Client
	reader   client.Reader
	status   *decofilecontroller.StatusWriter
	recorder events.EventRecorder
	notifier *notify.Notifier
	opts     Options
	// checkClient asks pods for their health after a step (no redirects, no proxy).
	checkClient *http.Client

	mu       sync.Mutex
	failures map[string]failure
	// retries spaces the retries of a failed rollout (per Decofile, reset with each new hash).
	retries workqueue.TypedRateLimiter[string]
	// pendingRollbacks holds, per Decofile, the rollback waiting for the delivery controller to
	// store the last good content again (see rollBack).
	pendingRollbacks sync.Map // key → pendingRollback
	// loads holds a slot per content being loaded.
	loads chan struct{}
	// memory is what running push rollouts may hold.
	memory *budget.Budget
	// runners and the requeue channel: see runners.go.
	runners runners
	// written remembers, per Decofile, this controller's last status write, so current reads
	// from the API server while the cache may not have it.
	written lastwrite.Tracker
	// confirmed remembers which content each pod last confirmed (status.rollout.confirmed).
	confirmed confirmations
}

// failure remembers when a failed rollout of one content hash may be retried.
type failure struct {
	hash string
	next time.Time
}

// +kubebuilder:rbac:groups=deco.sites,resources=decofiles,verbs=get;list;watch
// +kubebuilder:rbac:groups=deco.sites,resources=decofiles/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps;secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=create;update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Setup registers the rollout controller with mgr.
func Setup(mgr ctrl.Manager, o Options) error {
	_, err := setup(mgr, o)
	return err
}

// setup is Setup returning the reconciler it registered.
func setup(mgr ctrl.Manager, o Options) (*Reconciler, error) {
	if o.Protocol == "" {
		o.Protocol = notify.ProtocolPush
	}
	if o.RetryBase <= 0 {
		o.RetryBase = DefaultRetryBase
	}
	if o.RetryMax <= 0 {
		o.RetryMax = DefaultRetryMax
	}
	if o.MaxConcurrentRollouts <= 0 {
		o.MaxConcurrentRollouts = DefaultMaxConcurrentRollouts
	}
	if o.MaxContentBytes <= 0 {
		o.MaxContentBytes = DefaultMaxContentBytes
	}
	if o.MaxConcurrentLoads <= 0 {
		o.MaxConcurrentLoads = DefaultMaxConcurrentLoads
	}
	if o.MemoryBytes <= 0 {
		o.MemoryBytes = 3 * o.MaxContentBytes
	}
	// ConfigMaps, Secrets and Pods are read straight from the API server: only at rollout time,
	// and without caching every Secret and Pod of the cluster in the manager.
	reader := mgr.GetAPIReader()
	loaders := map[decov1alpha1.TargetType]Loader{decov1alpha1.TargetConfigMap: ConfigMapLoader{Reader: reader}}
	for t, l := range o.Loaders {
		loaders[t] = l
	}
	o.Loaders = loaders
	status, err := decofilecontroller.NewStatusWriter(mgr.GetConfig(), mgr.GetHTTPClient())
	if err != nil {
		return nil, err
	}
	r := &Reconciler{
		client:      mgr.GetClient(),
		reader:      reader,
		status:      status,
		recorder:    mgr.GetEventRecorder("siteops-rollout"),
		notifier:    notify.New(o.Notify),
		checkClient: notify.NewClient(),
		opts:        o,
		failures:    map[string]failure{},
		retries:     workqueue.NewTypedItemExponentialFailureRateLimiter[string](o.RetryBase, o.RetryMax),
		loads:       make(chan struct{}, o.MaxConcurrentLoads),
		memory:      newRolloutMemory(o.MemoryBytes),
		runners:     newRunners(),
	}
	if err := mgr.Add(&r.runners); err != nil {
		return nil, fmt.Errorf("add rollout runners: %w", err)
	}
	return r, ctrl.NewControllerManagedBy(mgr).
		Named("decofile-rollout").
		For(&decov1alpha1.Decofile{}, builder.WithPredicates(o.Shard.For(changePredicate()))).
		WatchesRawSource(source.Channel(r.runners.requeue, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: o.MaxConcurrentRollouts}).
		Complete(r)
}

// letGo stops what runs and forgets what is kept for a Decofile this controller no longer rolls
// out: deleted, or moved to another shard.
func (r *Reconciler) letGo(key client.ObjectKey) {
	r.stopRunner(key.String())
	r.forget(key.String())
	r.pendingRollbacks.Delete(key.String())
	r.written.Forget(key)
	r.confirmed.forget(key)
}

// changePredicate lets through what can start, retry or stop a rollout: a spec change (silent),
// new stored content, a changed confirmed hash and a Ready change, and a deletion (what is kept
// for the Decofile is let go); not the controller's own progress updates.
func changePredicate() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*decov1alpha1.Decofile)
			n, ok2 := e.ObjectNew.(*decov1alpha1.Decofile)
			if !ok1 || !ok2 {
				return false
			}
			return o.Generation != n.Generation ||
				o.Status.ContentHash != n.Status.ContentHash ||
				o.Status.NotifiedHash != n.Status.NotifiedHash ||
				o.Status.Timestamp != n.Status.Timestamp ||
				readyReason(o) != readyReason(n) // the delivery controller could not restore for a rollback
		},
	}
}

func readyReason(df *decov1alpha1.Decofile) string {
	if c := meta.FindStatusCondition(df.Status.Conditions, decov1alpha1.ConditionReady); c != nil {
		return c.Reason
	}
	return ""
}

// Reconcile decides whether the Decofile needs a rollout and starts it. The rollout itself runs
// in the Decofile's own runner (see runners.go), never in one of the controller's few workers, so
// pods that hold their requests delay nobody else's rollout.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	key := req.String()
	var df decov1alpha1.Decofile
	if err := r.client.Get(ctx, req.NamespacedName, &df); err != nil {
		if apierrors.IsNotFound(err) {
			r.letGo(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !r.opts.Shard.Owns(&df) {
		// Another shard's, or it moved there: a rollout running here stops, and the shard
		// that has it now decides from the status.
		r.letGo(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	r.written.Pending(req.NamespacedName, df.ResourceVersion) // forgets the last write once the cache has it
	if df.DeletionTimestamp != nil || !df.TargetOrDefault().Supported() {
		// Being deleted, or served by another operator (tanstack-kv): its pods are not ours to notify.
		r.stopRunner(key)
		return ctrl.Result{}, nil
	}
	if df.Spec.Suspend {
		// Suspended: no pod is notified until it is resumed; a rollout under way stops and
		// starts again on resume.
		r.stopRunner(key)
		return ctrl.Result{}, nil
	}
	if df.Spec.Silent {
		// Silent: no notifications, and no PodsNotified condition that would suggest otherwise.
		r.stopRunner(key)
		r.forget(key)
		return ctrl.Result{}, r.patchStatus(ctx, req.NamespacedName, func(d *decov1alpha1.Decofile) bool {
			return meta.RemoveStatusCondition(&d.Status.Conditions, decov1alpha1.ConditionPodsNotified)
		})
	}
	// Gated on the stored content, not on Ready: a source that is down (Ready=False) leaves the
	// content stored before it, and pods that missed it are still retried.
	hash := df.Status.ContentHash
	if restoredForRollback(&df) {
		// The delivery controller stored the last good content again: the pods get it back.
		r.startRunner(ctx, &df, hash)
		return ctrl.Result{}, nil
	}
	if hash == "" || hash == df.Status.NotifiedHash {
		if hash != "" && hash == df.Status.NotifiedHash {
			r.forget(key)
			if err := r.keepLastGood(ctx, &df); err != nil {
				logf.FromContext(ctx).Info("could not keep the confirmed content for rollbacks", "error", err.Error())
			}
		}
		return ctrl.Result{}, nil
	}
	if wait := r.backoffLeft(key, hash); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	r.startRunner(ctx, &df, hash)
	return ctrl.Result{}, nil
}

// restoredForRollback reports whether the delivery controller stored the last good content again
// for a rollback that has yet to send it to the pods.
func restoredForRollback(df *decov1alpha1.Decofile) bool {
	ro, lg := df.Status.Rollout, df.Status.LastGood
	return ro != nil && ro.Phase == PhaseRollingBack && lg != nil && df.Status.ContentHash != "" &&
		df.Status.ContentHash != ro.FailedHash && df.Status.ContentHash == lg.ContentHash
}

// rollout loads the stored content of df, notifies its pods and records the outcome. It returns
// how long to wait before the Decofile is looked at again (0: the status change that ends the
// rollout triggers the next reconcile by itself).
func (r *Reconciler) rollout(ctx context.Context, df *decov1alpha1.Decofile, hash string) time.Duration {
	log := logf.FromContext(ctx)
	key := client.ObjectKeyFromObject(df)
	id := decov1alpha1.RolloutID(&df.Status)
	log = log.WithValues("rollout", id, "contentHash", hash)
	ctx = logf.IntoContext(ctx, log)

	if df.Status.Rollout != nil && df.Status.Rollout.FailedHash == hash {
		// A rollback rejected this version: the delivery controller is storing the last good
		// content again, or could not.
		return r.waitRollback(ctx, df, id)
	}
	restoring := restoredForRollback(df)
	var pods []corev1.Pod
	var view *podView
	if !restoring {
		var err error
		if pods, view, err = listPods(ctx, r.reader, df, podListMaxAge(r.notifier.Config().Backoff)); err != nil {
			log.Info("could not list pods; will retry", "error", err.Error())
			return r.opts.RetryBase
		}
		if len(pods) == 0 && df.Spec.Rollout == nil {
			// No pod to tell: the content is neither loaded nor sent, and the start and the
			// result are one status write.
			startedAt := metav1.Now()
			return r.succeeded(ctx, df, hash, id, notify.Result{}, nil, startedAt, beginRollout(id, 0, &startedAt))
		}
	}
	// The push body's memory is held while pods are sent it (a progressive rollout gives it back
	// while it pauses) and while a rollback runs.
	body := r.newPushBody(df, id)
	if err := body.reserve(ctx); err != nil {
		return 0 // stopped or superseded
	}
	defer body.drop()
	if restoring {
		return r.finishRollback(ctx, df, body)
	}
	loader, ok := r.opts.Loaders[df.TargetOrDefault()]
	if !ok {
		return r.fail(ctx, df, id, hash, nil, nil, decov1alpha1.ReasonNotificationFailed, fmt.Sprintf("no content loader for target %q in this build", df.TargetOrDefault()), time.Now())
	}
	body.loader = loader
	content, err := r.load(ctx, loader, df)
	if errors.Is(err, ErrNotYetStored) {
		log.V(1).Info("store lags status; waiting", "reason", err.Error())
		return notYetStoredDelay
	}
	start := time.Now()
	if err != nil {
		if ctx.Err() != nil {
			return 0
		}
		return r.fail(ctx, df, id, hash, nil, nil, loadFailureReason(err), fmt.Sprintf("load stored content: %v", err), start)
	}
	token, err := r.reloadToken(ctx, df)
	if err != nil {
		return r.fail(ctx, df, id, hash, nil, nil, decov1alpha1.ReasonNotificationFailed, err.Error(), start)
	}

	// PodsNotified=Unknown for this version before the first pod hears of it. Without pods no
	// pod hears of it: the start is written together with the result, in one status write.
	startedAt := metav1.NewTime(start)
	begin := beginRollout(id, len(pods), &startedAt)
	if len(pods) > 0 {
		if err := r.patchStatus(ctx, key, begin); err != nil {
			log.Info("could not record the rollout start; will retry", "error", err.Error())
			return r.opts.RetryBase
		}
		begin = nil
	}

	targets := make([]notify.Pod, len(pods))
	for i := range pods {
		targets[i] = Target(&pods[i])
	}
	led := r.newLedger(df, hash, pods, targets)
	ro := notify.Rollout{
		ID: id, Protocol: r.opts.Protocol, Timestamp: content.Timestamp, Token: token,
		Pods: targets, Refresh: view.refresh,
	}
	if len(pods) > 0 {
		ro.Progress = func(p notify.Progress) { r.recordProgress(ctx, key, id, p) }
	}
	body.set(content)
	content = Content{} // the body holds the only copy needed from here on
	if df.Spec.Rollout != nil {
		return r.progressive(ctx, df, hash, id, ro, body, pods, led, startedAt, begin)
	}
	ro.Body = body.body
	log.Info("notifying pods", "pods", len(pods), "protocol", r.opts.Protocol)
	runCtx, stopWatch := r.watchSupersede(ctx, key, hash)
	res := r.notifier.Run(runCtx, ro)
	superseded := errors.Is(context.Cause(runCtx), errSuperseded) || errors.Is(context.Cause(ctx), errSuperseded)
	stopWatch()
	if superseded || ctx.Err() != nil {
		// Newer content (or silent mode) arrived: this version no longer matters. The change
		// that superseded it has queued the next reconcile, which resets PodsNotified.
		log.Info("rollout superseded by a newer change or stopped", "notified", res.Notified, "of", res.Total)
		return 0
	}
	for o, n := range map[string]int{"notified": res.Notified, "failed": res.Failed, "skipped": res.Skipped} {
		podNotificationsTotal.WithLabelValues(o).Add(float64(n))
	}
	rolloutDuration.Observe(res.Duration.Seconds())
	led.settle(res.Pods)
	if !res.Succeeded() {
		if missing := r.podsWithoutToken(ctx, df, res); len(missing) > 0 {
			return r.fail(ctx, df, id, hash, &res, led, ReasonMissingReloadToken, missingTokenMessage(df, missing), start)
		}
		return r.fail(ctx, df, id, hash, &res, led, decov1alpha1.ReasonNotificationFailed, failureReason(res, r.notifier.Config().Timeout), start)
	}

	return r.succeeded(ctx, df, hash, id, res, led, startedAt, begin)
}

// succeeded records that every pod confirmed hash (res), together with the start of the rollout
// when begin (not written yet) is set.
func (r *Reconciler) succeeded(ctx context.Context, df *decov1alpha1.Decofile, hash, id string, res notify.Result, led *ledger, startedAt metav1.Time, begin func(*decov1alpha1.Decofile) bool) time.Duration {
	log := logf.FromContext(ctx)
	key := client.ObjectKeyFromObject(df)
	rolloutsTotal.WithLabelValues("succeeded").Inc()
	finished := metav1.Now()
	if err := r.patchStatus(ctx, key, then(begin, confirmed(id, hash, res.Progress, led.counts(), startedAt, finished))); err != nil {
		log.Info("could not record the rollout result; will retry", "error", err.Error())
		return r.opts.RetryBase
	}
	r.forget(key.String())
	if res.Total > 0 {
		r.recorder.Eventf(df, nil, corev1.EventTypeNormal, "RolloutSucceeded", "Notify",
			"Notified %d of %d pods for %s in %s (%d skipped)", res.Notified, res.Total, id, res.Duration.Round(time.Millisecond), res.Skipped)
	}
	log.Info("rollout succeeded", "notified", res.Notified, "skipped", res.Skipped, "duration", res.Duration)
	return 0
}

// confirmed records that every pod confirmed hash in rollout id (counts: the pods by content).
func confirmed(id, hash string, p notify.Progress, counts []decov1alpha1.ConfirmedContent, startedAt, finished metav1.Time) func(*decov1alpha1.Decofile) bool {
	return func(d *decov1alpha1.Decofile) bool {
		setCondition(d, metav1.ConditionTrue, decov1alpha1.ReasonNotificationSucceeded, "Successfully notified all pods for "+id)
		d.Status.NotifiedHash = hash
		d.Status.Rollout = summary(id, p, &startedAt, &finished) // finishedAt always changes
		d.Status.Rollout.Confirmed = counts
		recordHistory(d, d.Status.Rollout, hash, ResultSucceeded, finished)
		return true
	}
}

// load reads the stored content with the loader, a few loads at a time: each holds up to the
// content limit plus the brotli window while it decodes.
func (r *Reconciler) load(ctx context.Context, l Loader, df *decov1alpha1.Decofile) (Content, error) {
	select {
	case r.loads <- struct{}{}:
	case <-ctx.Done():
		return Content{}, ctx.Err()
	}
	defer func() { <-r.loads }()
	return l.Load(ctx, df, r.opts.MaxContentBytes)
}

// loadFailureReason is the PodsNotified reason for content the loader refused.
func loadFailureReason(err error) string {
	switch {
	case errors.Is(err, ErrContentTooLarge):
		return ReasonContentTooLarge
	case errors.Is(err, ErrInvalidStoredContent):
		return ReasonInvalidStoredContent
	}
	return decov1alpha1.ReasonNotificationFailed
}

// errSuperseded ends a rollout whose content is no longer the stored one.
var errSuperseded = errors.New("superseded by newer content")

// supersedeCheckInterval is how often a running rollout checks whether it is still current.
const supersedeCheckInterval = time.Second

// watchSupersede returns a context that is cancelled with errSuperseded as soon as the Decofile
// (as the manager's cache sees it) holds other content, becomes silent or goes away, so a long rollout of
// an outdated version does not delay the current one. stop releases the checker.
func (r *Reconciler) watchSupersede(ctx context.Context, key client.ObjectKey, hash string) (context.Context, func()) {
	runCtx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(supersedeCheckInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-runCtx.Done():
				return
			case <-t.C:
				if r.superseded(runCtx, key, hash) {
					cancel(errSuperseded)
					return
				}
			}
		}
	}()
	return runCtx, func() { close(done); cancel(nil) }
}

// superseded reports whether the Decofile at key, as the manager's cache sees it, holds other
// content than hash, became silent or is gone; a failed read counts as not.
func (r *Reconciler) superseded(ctx context.Context, key client.ObjectKey, hash string) bool {
	var cur decov1alpha1.Decofile
	if err := r.client.Get(ctx, key, &cur); err != nil {
		return apierrors.IsNotFound(err)
	}
	return cur.DeletionTimestamp != nil || cur.Spec.Silent || cur.Spec.Suspend || cur.Status.ContentHash != hash
}

// fail records PodsNotified=False with reason and message and returns the backoff before the
// retry. res and led, when set, say which pods are behind and what each holds.
func (r *Reconciler) fail(ctx context.Context, df *decov1alpha1.Decofile, id, hash string, res *notify.Result, led *ledger, reason, detail string, start time.Time) time.Duration {
	rolloutsTotal.WithLabelValues("failed").Inc()
	startedAt, finished := metav1.NewTime(start), metav1.Now()
	p := notify.Progress{}
	var behind []decov1alpha1.PodBehind
	if res != nil {
		p, behind = res.Progress, podsBehind(*res, led)
	}
	msg := fmt.Sprintf("Failed to notify pods for %s: %s", id, detail)
	err := r.patchStatus(ctx, client.ObjectKeyFromObject(df), func(d *decov1alpha1.Decofile) bool {
		setCondition(d, metav1.ConditionFalse, reason, msg)
		d.Status.Rollout = summary(id, p, &startedAt, &finished)
		d.Status.Rollout.Behind = behind
		d.Status.Rollout.Confirmed = led.counts()
		recordHistory(d, d.Status.Rollout, hash, ResultFailed, finished)
		return true
	})
	wait := r.recordFailure(client.ObjectKeyFromObject(df).String(), hash)
	r.recorder.Eventf(df, nil, corev1.EventTypeWarning, "RolloutFailed", "Notify", "%s (retry in %s)", msg, wait)
	log := logf.FromContext(ctx)
	log.Info("rollout failed; will retry", "reason", reason, "message", detail, "retryIn", wait)
	if err != nil {
		log.Info("could not record the failed rollout", "error", err.Error())
	}
	return wait
}

// failureReason names the counts and the first few failing pods with their reasons.
func failureReason(res notify.Result, timeout time.Duration) string {
	var b strings.Builder
	if res.TimedOut {
		fmt.Fprintf(&b, "rollout timeout (%s) reached; ", timeout)
	}
	fmt.Fprintf(&b, "%d of %d pods failed (%d notified, %d skipped): ", res.Failed, res.Total, res.Notified, res.Skipped)
	var failed []podCheck
	for _, p := range res.FailedPods() {
		failed = append(failed, podCheck{name: p.Name, problem: p.Reason})
	}
	b.WriteString(problemList(failed))
	return b.String()
}

// reloadToken reads the workload's reload token from the Decofile's reload Secret.
func (r *Reconciler) reloadToken(ctx context.Context, df *decov1alpha1.Decofile) (string, error) {
	var s corev1.Secret
	name := df.ReloadSecretName()
	if err := r.reader.Get(ctx, client.ObjectKey{Namespace: df.Namespace, Name: name}, &s); err != nil {
		return "", fmt.Errorf("read reload Secret %s: %w", name, err)
	}
	tok := strings.TrimSpace(string(s.Data[decov1alpha1.ReloadTokenKey]))
	if tok == "" {
		return "", fmt.Errorf("reload Secret %s has no %q key", name, decov1alpha1.ReloadTokenKey)
	}
	return tok, nil
}

func (r *Reconciler) recordFailure(key, hash string) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.failures[key]
	if f.hash != hash {
		f = failure{hash: hash}
		r.retries.Forget(key)
	}
	wait := r.retries.When(key)
	f.next = time.Now().Add(wait)
	r.failures[key] = f
	return wait
}

// backoffLeft is the time until a failed rollout of hash may be retried (0 when it may run now).
func (r *Reconciler) backoffLeft(key, hash string) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.failures[key]
	if !ok || f.hash != hash {
		return 0
	}
	return max(0, time.Until(f.next))
}

func (r *Reconciler) forget(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.failures, key)
	r.retries.Forget(key)
}
