// Package controller holds the mirror's reconcilers: the GitTarget controller turns targets,
// providers and watch rules into the engine's desired state and records what the engine
// observes; the rule and provider controllers record their own resources' status.
package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/egress"
	"github.com/siteops/siteops/internal/mirror/engine"
	"github.com/siteops/siteops/internal/mirror/fairness"
	"github.com/siteops/siteops/internal/mirror/gitwriter"
	"github.com/siteops/siteops/internal/mirror/resolve"
	"github.com/siteops/siteops/internal/mirror/secretcrypt"
	"github.com/siteops/siteops/internal/shard"
)

// DefaultCommitWindow applies when a GitTarget sets none.
const DefaultCommitWindow = 5 * time.Second

// Workers is how many GitTargets are reconciled at once; one namespace holds at most
// PerNamespace of them, so a tenant editing its targets, providers or Secrets in a loop never
// holds back another tenant's.
const (
	Workers      = 4
	PerNamespace = Workers / 2
)

// ReasonSuspended is the Ready reason of a GitTarget or WatchRule whose spec.suspend is set.
const ReasonSuspended = "Suspended"

// resyncInterval re-reads credentials and discovery even without a watched change.
const resyncInterval = 5 * time.Minute

// Discovery resolves watch rules, caching the server's resource lists for a short while.
type Discovery struct {
	Client discovery.DiscoveryInterface
	// MaxAge is how long one discovery answer is reused; default 30s.
	MaxAge time.Duration

	mu     sync.Mutex
	at     time.Time
	groups []*metav1.APIGroup
	lists  []*metav1.APIResourceList
}

// Resolve resolves rules for namespaced or cluster-scoped resources.
func (d *Discovery) Resolve(rules []mirrorv1alpha1.ResourceRule, namespaced bool) (resolve.Result, error) {
	return d.ResolveFor(rules, namespaced, false)
}

// ResolveFor is Resolve for a target that writes Secrets encrypted (secrets true) or not.
func (d *Discovery) ResolveFor(rules []mirrorv1alpha1.ResourceRule, namespaced, secrets bool) (resolve.Result, error) {
	d.mu.Lock()
	maxAge := d.MaxAge
	if maxAge == 0 {
		maxAge = 30 * time.Second
	}
	if d.lists == nil || time.Since(d.at) > maxAge {
		g, l, err := resolve.Discover(d.Client)
		if err != nil {
			d.mu.Unlock()
			return resolve.Result{}, err
		}
		d.groups, d.lists, d.at = g, l, time.Now()
	}
	g, l := d.groups, d.lists
	d.mu.Unlock()
	return resolve.RulesFor(g, l, rules, namespaced, secrets)
}

// Invalidate drops the cached discovery answer (a new CRD may have appeared).
func (d *Discovery) Invalidate() {
	d.mu.Lock()
	d.lists = nil
	d.mu.Unlock()
}

// GitTargetReconciler runs a GitTarget's watches and writer through the engine.
type GitTargetReconciler struct {
	// Shard selects the targets this instance mirrors; one that leaves it is stopped here (its
	// writer pushes what it took in, its cursors stay for the shard that takes it over).
	Shard  shard.Selector
	Client client.Client
	// APIReader reads Secrets uncached, so the manager does not cache every Secret.
	APIReader client.Reader
	Discovery *Discovery
	Engine    *engine.Engine
	Recorder  events.EventRecorder
	// CursorsConfigured says a cursor store (Redis) is configured.
	CursorsConfigured bool
	// Egress is the URL policy of the mirror, checked here before a writer starts (the writers
	// check every connection too); nil allows https and ssh to public addresses only.
	Egress *egress.Policy
	// Changes carries the engine's status notifications into the work queue.
	Changes chan event.GenericEvent
	// HashKeys provides the key of the HMACs that recognise unchanged Secrets of targets that
	// write Secrets encrypted; nil keeps a random key per process.
	HashKeys *secretcrypt.HashKeys
}

// +kubebuilder:rbac:groups=mirror.siteops.dev,resources=gitproviders;gittargets;watchrules;clusterwatchrules,verbs=get;list;watch
// +kubebuilder:rbac:groups=mirror.siteops.dev,resources=gitproviders/status;gittargets/status;watchrules/status;clusterwatchrules/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// +kubebuilder:rbac:groups=*,resources=*,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Notify queues target for a status refresh; it never blocks.
func (r *GitTargetReconciler) Notify(target types.NamespacedName) {
	t := &mirrorv1alpha1.GitTarget{}
	t.Name, t.Namespace = target.Name, target.Namespace
	select {
	case r.Changes <- event.GenericEvent{Object: t}:
	default:
	}
}

// SetupWithManager registers the controller.
func (r *GitTargetReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Changes == nil {
		r.Changes = make(chan event.GenericEvent, 1024)
	}
	const name = "mirror-gittarget"
	return ctrl.NewControllerManagedBy(mgr).
		Named(name).
		For(&mirrorv1alpha1.GitTarget{}, builder.WithPredicates(r.Shard.For(predicate.GenerationChangedPredicate{}))).
		Watches(&mirrorv1alpha1.GitProvider{}, handler.EnqueueRequestsFromMapFunc(r.targetsOfProvider), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&mirrorv1alpha1.WatchRule{}, handler.EnqueueRequestsFromMapFunc(ruleTarget), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&mirrorv1alpha1.ClusterWatchRule{}, handler.EnqueueRequestsFromMapFunc(ruleTarget), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		WatchesRawSource(source.Channel(r.Changes, &handler.EnqueueRequestForObject{})).
		WithOptions(crcontroller.Options{MaxConcurrentReconciles: Workers}).
		Complete(&fairness.Limit{Inner: r, Controller: name, PerNamespace: PerNamespace})
}

func (r *GitTargetReconciler) targetsOfProvider(ctx context.Context, o client.Object) []reconcile.Request {
	var list mirrorv1alpha1.GitTargetList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, t := range list.Items {
		if t.Spec.ProviderRef.Name == o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&t)})
		}
	}
	return out
}

// ruleTarget maps a WatchRule or ClusterWatchRule to the GitTarget it names.
func ruleTarget(_ context.Context, o client.Object) []reconcile.Request {
	switch rule := o.(type) {
	case *mirrorv1alpha1.WatchRule:
		ns := rule.Spec.TargetRef.Namespace
		if ns == "" {
			ns = rule.Namespace
		}
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: rule.Spec.TargetRef.Name}}}
	case *mirrorv1alpha1.ClusterWatchRule:
		return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: rule.Spec.TargetRef.Namespace, Name: rule.Spec.TargetRef.Name}}}
	}
	return nil
}

// targetProblem is a reason the target cannot run, shown in its Ready condition.
type targetProblem struct {
	reason, message string
}

func (p *targetProblem) Error() string { return p.message }

// Reconcile reads the target, its provider and rules, hands the desired state to the engine and
// records status.
func (r *GitTargetReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	var target mirrorv1alpha1.GitTarget
	if err := r.Client.Get(ctx, req.NamespacedName, &target); err != nil {
		if apierrors.IsNotFound(err) {
			r.Engine.Forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !target.DeletionTimestamp.IsZero() || !r.Shard.Owns(&target) {
		r.Engine.Forget(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	if target.Spec.Suspend {
		// The writer pushes what it already took in as it stops; the cursors stay in Redis, so
		// the resume goes on from them.
		r.Engine.Remove(req.NamespacedName)
		suspended := &targetProblem{ReasonSuspended, "mirroring is suspended: spec.suspend is set; nothing is committed until it is unset"}
		return requeueOnConflict(ctrl.Result{}, r.writeStatus(ctx, &target, nil, target.Status.Excluded, suspended))
	}
	spec, excluded, err := r.desired(ctx, &target)
	var problem *targetProblem
	switch {
	case errors.As(err, &problem):
		r.Engine.Remove(req.NamespacedName)
		return requeueOnConflict(ctrl.Result{RequeueAfter: resyncInterval}, r.writeStatus(ctx, &target, nil, excluded, problem))
	case err != nil:
		return ctrl.Result{}, err
	}
	if err := r.Engine.Apply(req.NamespacedName, spec); err != nil {
		if errors.Is(err, engine.ErrNotStarted) {
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, err
	}
	st, _ := r.Engine.Status(req.NamespacedName)
	if err := r.writeStatus(ctx, &target, &st, excluded, nil); err != nil {
		return requeueOnConflict(ctrl.Result{}, err)
	}
	log.V(1).Info("mirroring", "streams", st.Streams, "pending", st.Writer.Pending)
	return ctrl.Result{RequeueAfter: resyncInterval}, nil
}

// requeueOnConflict retries a status patch that lost an optimistic-lock race (the cache had not
// seen our previous patch yet) soon and quietly; other errors are returned.
func requeueOnConflict(res ctrl.Result, err error) (ctrl.Result, error) {
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: 200 * time.Millisecond}, nil
	}
	return res, err
}

// desired builds the engine spec of target, or a targetProblem saying why it cannot run.
func (r *GitTargetReconciler) desired(ctx context.Context, target *mirrorv1alpha1.GitTarget) (engine.TargetSpec, []mirrorv1alpha1.ExcludedResource, error) {
	var provider mirrorv1alpha1.GitProvider
	key := types.NamespacedName{Namespace: target.Namespace, Name: target.Spec.ProviderRef.Name}
	if err := r.Client.Get(ctx, key, &provider); err != nil {
		if apierrors.IsNotFound(err) {
			return engine.TargetSpec{}, nil, &targetProblem{"ProviderNotFound", fmt.Sprintf("GitProvider %s not found", key.Name)}
		}
		return engine.TargetSpec{}, nil, err
	}
	if !BranchAllowed(provider.Spec.AllowedBranches, target.Spec.Branch) {
		return engine.TargetSpec{}, nil, &targetProblem{"BranchNotAllowed", fmt.Sprintf("branch %q does not match the allowedBranches %v of GitProvider %s", target.Spec.Branch, provider.Spec.AllowedBranches, provider.Name)}
	}
	if err := remoteProblem(r.Egress, &provider); err != nil {
		return engine.TargetSpec{}, nil, err
	}
	auth, authVersion, err := loadCredentials(ctx, r.APIReader, &provider)
	if err != nil {
		return engine.TargetSpec{}, nil, err
	}
	// A provider that signs but whose key cannot be used runs no writer: nothing is committed unsigned.
	signer, signingVersion, err := loadSigner(ctx, r.APIReader, &provider)
	if err != nil {
		return engine.TargetSpec{}, nil, err
	}
	window := DefaultCommitWindow
	if target.Spec.CommitWindow != nil {
		window = target.Spec.CommitWindow.Duration
	}
	secrets, err := r.secretsSpec(ctx, target)
	if err != nil {
		return engine.TargetSpec{}, nil, err
	}
	spec := engine.TargetSpec{
		Secrets:       secrets,
		Replay:        layoutChanged(target),
		UID:           string(target.UID),
		Path:          target.Spec.Path,
		IgnoreDeletes: target.Spec.Deletes == mirrorv1alpha1.DeletesIgnore,
		Writer: engine.WriterSpec{
			// One writer per provider: credentials and committer are never shared across providers.
			Owner: provider.Namespace + "/" + provider.Name,
			URL:   provider.Spec.URL, Branch: target.Spec.Branch, Auth: auth, AuthVersion: authVersion,
			Committer: gitwriter.Signature{Name: provider.Spec.Committer.Name, Email: provider.Spec.Committer.Email},
			Window:    window,
			Signer:    signer, SigningVersion: signingVersion,
		},
	}
	var excluded []mirrorv1alpha1.ExcludedResource
	add := func(res resolve.Result, ns string, ignore *mirrorv1alpha1.IgnoreWriters) {
		excluded = append(excluded, res.Excluded...)
		managers, users := ignoreLists(ignore)
		for _, rs := range res.Resources {
			s := engine.StreamSpec{GVR: rs.GVR, Namespace: ns}
			idx := slices.IndexFunc(spec.Streams, func(x engine.StreamSpec) bool { return x.GVR == rs.GVR && x.Namespace == ns })
			if idx >= 0 {
				for _, op := range rs.Operations {
					if !slices.Contains(spec.Streams[idx].Operations, op) {
						spec.Streams[idx].Operations = append(spec.Streams[idx].Operations, op)
					}
				}
				slices.Sort(spec.Streams[idx].Operations)
				// A writer is ignored only when every rule selecting the resource ignores it.
				spec.Streams[idx].IgnoreFieldManagers = intersect(spec.Streams[idx].IgnoreFieldManagers, managers)
				spec.Streams[idx].IgnoreUsers = intersect(spec.Streams[idx].IgnoreUsers, users)
				continue
			}
			s.Operations = slices.Clone(rs.Operations)
			s.IgnoreFieldManagers, s.IgnoreUsers = managers, users
			spec.Streams = append(spec.Streams, s)
		}
	}
	var rules mirrorv1alpha1.WatchRuleList
	if err := r.Client.List(ctx, &rules, client.InNamespace(target.Namespace)); err != nil {
		return spec, nil, err
	}
	for _, rule := range rules.Items {
		if rule.Spec.TargetRef.Name != target.Name || (rule.Spec.TargetRef.Namespace != "" && rule.Spec.TargetRef.Namespace != target.Namespace) || rule.Spec.Suspend {
			continue
		}
		// Rules that resolve to nothing report it in their own status.
		res, _ := r.Discovery.ResolveFor(rule.Spec.Rules, true, secrets != nil)
		add(res, rule.Namespace, rule.Spec.Ignore)
	}
	var crules mirrorv1alpha1.ClusterWatchRuleList
	if err := r.Client.List(ctx, &crules); err != nil {
		return spec, nil, err
	}
	for _, rule := range crules.Items {
		if rule.Spec.TargetRef.Name != target.Name || rule.Spec.TargetRef.Namespace != target.Namespace {
			continue
		}
		res, _ := r.Discovery.ResolveFor(rule.Spec.Rules, false, secrets != nil)
		add(res, "", rule.Spec.Ignore)
	}
	slices.SortFunc(excluded, func(a, b mirrorv1alpha1.ExcludedResource) int {
		if a.Resource < b.Resource {
			return -1
		} else if a.Resource > b.Resource {
			return 1
		}
		return 0
	})
	excluded = slices.Compact(excluded)
	return spec, excluded, nil
}

// layoutDigest identifies the spec fields of a GitTarget that decide which files are written
// where: all but suspend and commitWindow.
func layoutDigest(spec *mirrorv1alpha1.GitTargetSpec) string {
	layout := spec.DeepCopy()
	layout.Suspend, layout.CommitWindow = false, nil
	b, _ := json.Marshal(layout) // a struct of strings, bools and slices always marshals
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// layoutChanged says whether the files may have moved (path, branch, provider…) since the
// cursors were recorded, so they must not skip the replay. A status from before the digest was
// recorded falls back to the generation.
func layoutChanged(target *mirrorv1alpha1.GitTarget) bool {
	if d := target.Status.LayoutDigest; d != "" {
		return d != layoutDigest(&target.Spec)
	}
	return target.Status.ObservedGeneration != 0 && target.Status.ObservedGeneration != target.Generation
}

// ignoreLists returns a rule's ignore lists sorted and without duplicates.
func ignoreLists(ig *mirrorv1alpha1.IgnoreWriters) (managers, users []string) {
	if ig == nil {
		return nil, nil
	}
	managers, users = slices.Clone(ig.FieldManagers), slices.Clone(ig.Users)
	slices.Sort(managers)
	slices.Sort(users)
	return slices.Compact(managers), slices.Compact(users)
}

// intersect returns the sorted elements of a that are also in b.
func intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// secretsSpec is the engine's view of spec.secrets: nil unless the target opted in to write
// Secrets encrypted, with its recipients checked and its HMAC key derived.
func (r *GitTargetReconciler) secretsSpec(ctx context.Context, target *mirrorv1alpha1.GitTarget) (*engine.SecretsSpec, error) {
	p := target.Spec.Secrets
	if p == nil || p.Mode != mirrorv1alpha1.SecretsEncrypt {
		return nil, nil
	}
	var given []string
	if p.Age != nil {
		given = p.Age.Recipients
	}
	recipients, err := secretcrypt.ParseRecipients(given)
	if err != nil {
		return nil, &targetProblem{"SecretsRecipientsInvalid", "spec.secrets: " + err.Error()}
	}
	if r.HashKeys == nil {
		r.HashKeys = &secretcrypt.HashKeys{}
	}
	master, err := r.HashKeys.Key(ctx)
	if err != nil {
		return nil, &targetProblem{"SecretsHashKeyUnavailable", err.Error()}
	}
	return &engine.SecretsSpec{Recipients: recipients, HashKey: secretcrypt.TargetHashKey(master, string(target.UID))}, nil
}

// BranchAllowed reports whether branch matches one of the globs (path.Match); none allows all.
func BranchAllowed(globs []string, branch string) bool {
	if len(globs) == 0 {
		return true
	}
	for _, g := range globs {
		if ok, err := path.Match(g, branch); err == nil && ok {
			return true
		}
	}
	return false
}

// remoteProblem checks what can be known of the provider's URL before connecting (scheme, an IP
// address as host) against the mirror's URL policy.
func remoteProblem(p *egress.Policy, provider *mirrorv1alpha1.GitProvider) *targetProblem {
	err := gitwriter.CheckRemote(p, provider.Spec.URL)
	switch {
	case err == nil:
		return nil
	case egress.IsRefused(err):
		return &targetProblem{gitwriter.ReasonRemoteNotAllowed, fmt.Sprintf("GitProvider %s: %s", provider.Name, err)}
	}
	return &targetProblem{"InvalidURL", fmt.Sprintf("GitProvider %s: %s", provider.Name, err)}
}

// loadCredentials reads the provider's Secret and returns the auth method and a version that
// changes whenever the Secret does.
func loadCredentials(ctx context.Context, reader client.Reader, p *mirrorv1alpha1.GitProvider) (transport.AuthMethod, string, error) {
	var data map[string][]byte
	version := ""
	if p.Spec.SecretRef != nil {
		var s corev1.Secret
		if err := reader.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: p.Spec.SecretRef.Name}, &s); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, "", &targetProblem{"SecretNotFound", fmt.Sprintf("Secret %s of GitProvider %s not found", p.Spec.SecretRef.Name, p.Name)}
			}
			return nil, "", fmt.Errorf("read Secret %s of GitProvider %s: %w", p.Spec.SecretRef.Name, p.Name, err)
		}
		data, version = s.Data, s.ResourceVersion
	}
	auth, err := gitwriter.Credentials(p.Spec.URL, data)
	if err != nil {
		return nil, "", &targetProblem{"CredentialsInvalid", err.Error()}
	}
	return auth, version, nil
}

// writeStatus records the engine's view (st) or the problem, and emits an Event when Ready
// changes. Nothing is written when nothing changed.
func (r *GitTargetReconciler) writeStatus(ctx context.Context, target *mirrorv1alpha1.GitTarget, st *engine.TargetStatus, excluded []mirrorv1alpha1.ExcludedResource, problem *targetProblem) error {
	old := target.DeepCopy()
	s := &target.Status
	s.ObservedGeneration = target.Generation
	s.Excluded = excluded
	s.SkippedSecrets = 0
	for _, e := range excluded {
		if e.Reason == resolve.ReasonSecret {
			s.SkippedSecrets++
		}
	}
	ready := metav1.Condition{Type: mirrorv1alpha1.ConditionReady, ObservedGeneration: target.Generation}
	switch {
	case problem != nil:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, problem.reason, problem.message
		s.WatchedStreams, s.PendingWrites = 0, 0
	case st.Writer.LastError != nil:
		// The writer's errors never carry the remote's words (see gitwriter.RemoteError).
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "PushFailed", st.Writer.LastError.Error()
		if egress.IsRefused(st.Writer.LastError) {
			ready.Reason = gitwriter.ReasonRemoteNotAllowed
		} else if errors.Is(st.Writer.LastError, gitwriter.ErrFetchTooLarge) {
			ready.Reason = gitwriter.ReasonFetchTooLarge
		}
	case st.Writer.TooLarge[string(target.UID)] != nil:
		// Only this target's sweep was refused; its other changes and other targets' go on.
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, gitwriter.ReasonTargetTooLarge, st.Writer.TooLarge[string(target.UID)].Error()
	case st.Streams == 0:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionTrue, "Idle", "no WatchRule or ClusterWatchRule selects a resource for this target"
	default:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionTrue, "Mirroring", fmt.Sprintf("%d watches running", st.Streams)
	}
	if st != nil {
		// The engine runs this spec now: the cursors it records belong to its layout.
		s.LayoutDigest = layoutDigest(&target.Spec)
		s.WatchedStreams = int32(st.Streams)
		s.PendingWrites = int32(st.Writer.Pending)
		if st.Writer.LastPushedCommit != "" {
			s.LastPushedCommit = st.Writer.LastPushedCommit
			t := metav1.NewTime(st.Writer.LastPushTime.Truncate(time.Second))
			s.LastPushTime = &t
		}
		durable := metav1.Condition{Type: mirrorv1alpha1.ConditionCursorsDurable, Status: metav1.ConditionTrue, Reason: "Recorded",
			Message: "watch resume cursors are recorded in Redis after each push", ObservedGeneration: target.Generation}
		if !r.CursorsConfigured {
			durable.Status, durable.Reason = metav1.ConditionFalse, "NotConfigured"
			durable.Message = "no Redis is configured (--redis-addr): every restart replays and sweeps"
		} else if st.Writer.CursorError != nil {
			durable.Status, durable.Reason = metav1.ConditionFalse, "RedisUnavailable"
			durable.Message = "commits continue, but resume cursors cannot be recorded; the next restart replays: " + st.Writer.CursorError.Error()
		}
		meta.SetStatusCondition(&s.Conditions, durable)
	}
	prevReady := meta.FindStatusCondition(old.Status.Conditions, mirrorv1alpha1.ConditionReady)
	if ready.Reason != ReasonSuspended {
		recordPushHistory(s, old.Status.LastPushedCommit, prevReady, ready)
	}
	meta.SetStatusCondition(&s.Conditions, ready)
	if equality.Semantic.DeepEqual(old.Status, target.Status) {
		return nil
	}
	if r.Recorder != nil && (prevReady == nil || prevReady.Reason != ready.Reason) {
		r.Recorder.Eventf(target, nil, eventType(ready), ready.Reason, "Reconcile", "%s", ready.Message)
	}
	if err := r.Client.Status().Patch(ctx, target, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("patch GitTarget status: %w", err)
	}
	return nil
}

// eventType is Normal for a Ready condition that is True or says the object is suspended on
// purpose, Warning otherwise.
func eventType(ready metav1.Condition) string {
	if ready.Status == metav1.ConditionTrue || ready.Reason == ReasonSuspended {
		return corev1.EventTypeNormal
	}
	return corev1.EventTypeWarning
}

// recordPushHistory puts a new push, or a new push failure, first in s.History: a commit that
// differs from the one recorded before, or Ready turning False for a push (the same failure
// again is counted in its entry).
func recordPushHistory(s *mirrorv1alpha1.GitTargetStatus, prevCommit string, prevReady *metav1.Condition, ready metav1.Condition) {
	var rec *mirrorv1alpha1.PushRecord
	switch {
	case s.LastPushedCommit != "" && s.LastPushedCommit != prevCommit && s.LastPushTime != nil:
		rec = &mirrorv1alpha1.PushRecord{Commit: s.LastPushedCommit, Result: "Pushed", Time: *s.LastPushTime, Count: 1}
	case ready.Status == metav1.ConditionFalse && (prevReady == nil || prevReady.Reason != ready.Reason):
		rec = &mirrorv1alpha1.PushRecord{Result: ready.Reason, Time: metav1.NewTime(time.Now().Truncate(time.Second)), Count: 1}
		if h := s.History; len(h) > 0 && h[0].Commit == "" && h[0].Result == ready.Reason {
			rec.Count = h[0].Count + 1
			rec.Time = h[0].Time
			s.History = h[1:]
		}
	}
	if rec == nil {
		return
	}
	h := s.History
	s.History = append([]mirrorv1alpha1.PushRecord{*rec}, h[:min(len(h), mirrorv1alpha1.MaxHistory-1)]...)
}

// matchGlob checks that a branch glob is well-formed.
func matchGlob(g string) (bool, error) { return path.Match(g, "") }
