package provision

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/shard"
	"github.com/siteops/siteops/internal/tenant/acl"
	"github.com/siteops/siteops/internal/tenant/metrics"
	"github.com/siteops/siteops/internal/tenant/resync"
	"github.com/siteops/siteops/internal/tenant/rollout"
)

// Nodes is what the reconciler needs from the Valkey node set.
type Nodes interface {
	Sync(ctx context.Context, prefer, addr string, users []acl.User) acl.Result
	Delete(ctx context.Context, names []string) acl.Result
	Discover(ctx context.Context, prefer string) ([]acl.Node, error)
	PasswordHashes(ctx context.Context, addr, user string) ([]string, error)
}

// Recorder records Events (the events.k8s.io API's recorder signature).
type Recorder interface {
	Eventf(regarding runtime.Object, related runtime.Object, eventtype, reason, action, note string, args ...any)
}

// Reconciler provisions, rotates and removes one namespace's ACL user.
type Reconciler struct {
	// Shard selects the namespaces this instance provisions.
	Shard shard.Selector
	// Client reads namespaces (cached) and writes namespaces and Secrets.
	Client client.Client
	// Reader reads Namespaces and Secrets without a cache, so each decision starts from the
	// newest state (a rotation must not run twice on a stale copy).
	Reader client.Reader
	// Nodes applies and removes ACL users on the Valkey nodes.
	Nodes Nodes
	// Prover, when set, proves the user's isolation on every node before applying it.
	Prover *resync.Prover
	// Roller restarts the namespace's workloads after a credential change.
	Roller *rollout.Roller
	// Events records Events on namespaces.
	Events Recorder
	// ReservedUsers are usernames no tenant may get (besides AlwaysReserved).
	ReservedUsers []string
	// ReservedKeyPrefixes are key prefixes no tenant's key patterns may cover (CoveredKeyPrefix).
	ReservedKeyPrefixes []string
	// DeleteTimeout bounds how long an unreachable Valkey holds a namespace's finalizer.
	DeleteTimeout time.Duration
	// RolloutPoll is how often a rotation checks whether workloads finished rolling out.
	RolloutPoll time.Duration
	// MaxGrace bounds how long earlier passwords stay valid while the workloads roll out; 0
	// waits for the rollout however long it takes.
	MaxGrace time.Duration
	// Guard, when set, is the resync's Syncer.Guard: it holds one user while its state is
	// written and applied, so a concurrent resync round cannot apply the state it replaces.
	// Only that user is held; other tenants and the rounds never wait for it.
	Guard *resync.Guard

	mu           sync.Mutex
	firstDeletes map[string]time.Time
	applied      map[string]applied
	lastApply    map[string]time.Time
}

// Reconcile brings one namespace's ACL user, Secret and finalizer in line with its annotations.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var ns corev1.Namespace
	if err := r.Client.Get(ctx, req.NamespacedName, &ns); err != nil {
		if apierrors.IsNotFound(err) {
			r.forgetNamespace(req.Name)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !Wanted(&ns) {
		if !slices.Contains(ns.Finalizers, Finalizer) {
			return ctrl.Result{}, nil
		}
		return r.deprovision(ctx, &ns)
	}
	r.forgetDelete(ns.Name)
	user := Username(ns.Name)
	if Reserved(user, r.ReservedUsers) {
		r.Events.Eventf(&ns, nil, corev1.EventTypeWarning, ReasonReservedUsername, "Refuse",
			"username %q is reserved; rename the namespace to get a Valkey ACL user", user)
		return ctrl.Result{}, nil
	}
	if p := CoveredKeyPrefix(user, r.ReservedKeyPrefixes); p != "" {
		r.Events.Eventf(&ns, nil, corev1.EventTypeWarning, ReasonReservedKeyPrefix, "Refuse",
			"username %q would get key patterns ~%s:* and ~lock:%s:*, which cover the reserved key prefix %q (siteops' own keys or another service's on the same Valkey); rename the namespace to get a Valkey ACL user",
			user, user, user, p)
		if slices.Contains(ns.Finalizers, Finalizer) {
			// Provisioned before the prefix was reserved: the user reaches keys that are not its own.
			return r.deprovision(ctx, &ns)
		}
		return ctrl.Result{}, nil
	}
	if owner, err := r.owner(ctx, user); err != nil {
		return ctrl.Result{}, err
	} else if owner != ns.Name {
		r.Events.Eventf(&ns, nil, corev1.EventTypeWarning, ReasonUsernameCollision, "Refuse",
			"username %q already belongs to namespace %q; this namespace gets no Valkey ACL user", user, owner)
		return ctrl.Result{}, nil
	}
	if !slices.Contains(ns.Finalizers, Finalizer) {
		patch := client.MergeFromWithOptions(ns.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(&ns, Finalizer)
		if err := r.Client.Patch(ctx, &ns, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("add finalizer to namespace %s: %w", ns.Name, err)
		}
		defer r.countTenants(ctx)
	}
	return r.provision(ctx, ns.Name, user)
}

// owner returns the namespace entitled to user among the opted-in namespaces mapping to it.
func (r *Reconciler) owner(ctx context.Context, user string) (string, error) {
	var candidates []corev1.Namespace
	for _, name := range NamespacesFor(user) {
		var ns corev1.Namespace
		if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, &ns); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return "", fmt.Errorf("read namespace %s: %w", name, err)
		}
		if Wanted(&ns) || slices.Contains(ns.Finalizers, Finalizer) {
			candidates = append(candidates, ns)
		}
	}
	return Owner(candidates), nil
}

// MaxRetiring bounds how many earlier passwords stay valid at once while workloads roll out.
const MaxRetiring = 8

// change says why the current password changed in one reconcile.
type change int

const (
	unchanged change = iota
	issued           // first provision (or the first after an upgrade that found nothing to keep)
	rotated          // the rotate annotation asked for it
	reissued         // the Secret was deleted or its password replaced: the operator's is unknown
)

// provision decides the namespace's credentials from its own annotations (the authority), then
// makes the Secret, the nodes and the workloads follow. The Secret is only ever read to recover
// the clear password, and only when it matches the digest on the Namespace.
func (r *Reconciler) provision(ctx context.Context, name, user string) (ctrl.Result, error) {
	ns := &corev1.Namespace{}
	if err := r.Reader.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	st, stateErr := StateFrom(ns)
	if stateErr != nil {
		metrics.UserErrors.WithLabelValues(ns.Name).Inc()
		r.Events.Eventf(ns, nil, corev1.EventTypeWarning, ReasonInvalidState, "Provision",
			"ignored invalid Valkey ACL state on the namespace (rewritten now): %v", stateErr)
	}
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: ns.Name, Name: decov1.ValkeyACLSecretName}
	if err := r.Reader.Get(ctx, key, secret); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("read Secret %s: %w", key, err)
		}
		secret = nil
	}
	var pass string
	if secret != nil && st.Digest != "" && acl.HashPassword(string(secret.Data[decov1.ValkeyACLPasswordKey])) == st.Digest {
		pass = string(secret.Data[decov1.ValkeyACLPasswordKey])
	}
	why := unchanged
	rotate := ns.Annotations[decov1.AnnotationValkeyACLRotate]
	switch {
	case st.Digest == "":
		var err error
		if pass, why, err = r.adopt(ctx, &st, secret, user, rotate); err != nil {
			return ctrl.Result{}, err
		}
	case rotate != "" && rotate != st.Rotated:
		why, st.Rotated = rotated, rotate
	case pass == "":
		why = reissued
	}
	if why == rotated || why == reissued {
		// The operator's current password is kept valid (by digest) until the workloads rolled;
		// a password a tenant wrote into the Secret is never applied.
		st.Retiring = appendNew(st.Retiring, st.Digest)
		var err error
		if pass, err = acl.NewPassword(); err != nil {
			return ctrl.Result{}, err
		}
	}
	st.Digest = acl.HashPassword(pass)
	st.Retiring = slices.DeleteFunc(st.Retiring, func(h string) bool { return h == st.Digest })
	if n := len(st.Retiring); n > MaxRetiring {
		// A tenant that edits its Secret again and again while its workloads never roll out
		// must not grow the rule every node applies on each resync: keep the newest.
		st.Retiring = st.Retiring[n-MaxRetiring:]
	}
	cut := r.cutRetiring(ns, &st, time.Now())
	creds := acl.User{Name: user, Password: pass, RetiredHashes: st.Retiring}
	rev := Revision(creds)
	want := appliedFor(ns, st, user)
	if why == unchanged && cut == "" && stateRecorded(ns, st) && r.wasApplied(ns.Name, want) {
		// Nothing the nodes hold can differ from the last apply (a node that lost the user is
		// healed by the resync rounds): an edit of the Secret costs no node any work.
		if err := r.restoreSecret(ctx, ns, secret, creds, why); err != nil {
			return ctrl.Result{}, err
		}
	} else {
		if wait := r.applyWait(ns.Name, time.Now()); wait > 0 {
			// Decided again from the newest state when the namespace's next apply is due.
			return ctrl.Result{RequeueAfter: wait}, nil
		}
		res, err := r.apply(ctx, ns, st, creds, func() error { return r.restoreSecret(ctx, ns, secret, creds, why) })
		if err != nil {
			return ctrl.Result{}, err
		}
		if cut != "" {
			r.reportCut(ctx, ns, user, rev, cut)
		}
		if err := errors.Join(res.Err(), res.UserErrors()[user]); err != nil {
			r.forgetApplied(ns.Name)
			metrics.Errors.WithLabelValues(metrics.OpUpsert).Inc()
			r.Events.Eventf(ns, nil, corev1.EventTypeWarning, ReasonProvisionFailed, "Provision",
				"could not apply Valkey ACL user %q on every node: %v", user, err)
			return ctrl.Result{}, fmt.Errorf("apply ACL user %q: %w", user, err)
		}
		r.remember(ns.Name, want)
		r.reportApplied(ctx, ns, user, why, res)
	}
	if why != unchanged || len(creds.RetiredHashes) > 0 {
		patched, err := r.Roller.Roll(ctx, ns.Name, rev)
		if len(patched) > 0 {
			names := make([]string, len(patched))
			for i, w := range patched {
				names[i] = w.String()
			}
			r.Events.Eventf(ns, nil, corev1.EventTypeNormal, ReasonWorkloadsRestarted, "Restart",
				"restarted %s to pick up new Valkey credentials", strings.Join(names, ", "))
		}
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("restart workloads of %s: %w", ns.Name, err)
		}
	}
	if len(creds.RetiredHashes) == 0 {
		return ctrl.Result{}, nil
	}
	return r.finishRotation(ctx, ns, creds, rev)
}

// reportApplied counts and reports what an apply did: a first provision, a rotation, new
// credentials after a lost Secret, or a user a node had lost.
func (r *Reconciler) reportApplied(ctx context.Context, ns *corev1.Namespace, user string, why change, res acl.Result) {
	switch {
	case why == issued:
		metrics.Provisioned.Inc()
		r.Events.Eventf(ns, nil, corev1.EventTypeNormal, ReasonProvisioned, "Provision",
			"Valkey ACL user %q provisioned on %d nodes", user, len(res.Nodes))
	case why == rotated:
		r.Events.Eventf(ns, nil, corev1.EventTypeNormal, ReasonRotated, "Rotate",
			"Valkey password of %q rotated; the old one stays valid until the workloads have restarted (at most %s)", user, r.MaxGrace)
	case why == reissued:
		metrics.Provisioned.Inc()
		r.Events.Eventf(ns, nil, corev1.EventTypeNormal, ReasonProvisioned, "Provision",
			"Valkey credentials of %q were missing from (or changed in) Secret %s and were issued again; the previous password stays valid until the workloads have restarted", user, decov1.ValkeyACLSecretName)
	case len(res.MissingUsers()) > 0:
		metrics.SelfHealed.Inc()
		var nodes []string
		for _, n := range res.Nodes {
			if len(n.Missing) > 0 {
				nodes = append(nodes, n.Node.Addr)
			}
		}
		logf.FromContext(ctx).Info("re-provisioned a lost ACL user", "user", user, "nodes", nodes)
		r.Events.Eventf(ns, nil, corev1.EventTypeNormal, ReasonSelfHealed, "Heal",
			"Valkey ACL user %q was missing on %s and was provisioned again", user, strings.Join(nodes, ", "))
	}
}

// apply records st on the namespace (the authority every later step and resync follows), runs
// between (writing the Secret), proves the user's isolation and applies it on every node,
// holding the user (and only it) in Guard throughout.
func (r *Reconciler) apply(ctx context.Context, ns *corev1.Namespace, st State, u acl.User, between func() error) (acl.Result, error) {
	if r.Guard != nil {
		defer r.Guard.Lock(u.Name)()
	}
	if err := r.writeState(ctx, ns, st); err != nil {
		return acl.Result{}, err
	}
	if between != nil {
		if err := between(); err != nil {
			return acl.Result{}, err
		}
	}
	r.prove(ctx, ns.Name, u)
	return r.Nodes.Sync(ctx, "", "", []acl.User{u}), nil
}

// adopt decides the first state of a namespace without a digest: a new tenant, or one
// provisioned by a version that kept the state on the Secret. The Secret's password is kept only
// when the master already accepts it for this very user, so a Secret edited before the upgrade
// is not taken as authority; every password the master accepts stays valid until the rollout.
func (r *Reconciler) adopt(ctx context.Context, st *State, secret *corev1.Secret, user, rotate string) (string, change, error) {
	nodes, err := r.Nodes.Discover(ctx, "")
	if err != nil {
		metrics.Errors.WithLabelValues(metrics.OpCheck).Inc()
		return "", unchanged, err
	}
	have, err := r.Nodes.PasswordHashes(ctx, nodes[0].Addr, user)
	if err != nil {
		metrics.Errors.WithLabelValues(metrics.OpCheck).Inc()
		return "", unchanged, fmt.Errorf("read existing passwords of %q on %s: %w", user, nodes[0].Addr, err)
	}
	for _, h := range have {
		st.Retiring = appendNew(st.Retiring, h)
	}
	if secret != nil && string(secret.Data[decov1.ValkeyACLUsernameKey]) == user {
		p := string(secret.Data[decov1.ValkeyACLPasswordKey])
		if p != "" && slices.Contains(have, acl.HashPassword(p)) {
			if rotate != "" && secret.Annotations[AnnotationRotated] == rotate {
				st.Rotated = rotate
			}
			return p, unchanged, nil
		}
	}
	p, err := acl.NewPassword()
	if err != nil {
		return "", unchanged, err
	}
	st.Rotated = rotate
	return p, issued, nil
}

// writeState records st on the namespace when it differs from what is there.
func (r *Reconciler) writeState(ctx context.Context, ns *corev1.Namespace, st State) error {
	patch := client.MergeFromWithOptions(ns.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if ns.Annotations == nil {
		ns.Annotations = map[string]string{}
	}
	before := maps.Clone(ns.Annotations)
	st.Apply(ns.Annotations)
	if maps.Equal(before, ns.Annotations) {
		return nil
	}
	if err := r.Client.Patch(ctx, ns, patch); err != nil {
		return fmt.Errorf("record Valkey ACL state on namespace %s: %w", ns.Name, err)
	}
	return nil
}

// prove runs the isolation proof for one user on every node, when a Prover is set.
func (r *Reconciler) prove(ctx context.Context, namespace string, u acl.User) {
	if r.Prover == nil {
		return
	}
	nodes, err := r.Nodes.Discover(ctx, "")
	if err != nil {
		return // Sync reports it
	}
	r.Prover.Prove(ctx, nodes, []resync.Tenant{{Namespace: namespace, User: u}}, false)
}

// finishRotation drops the retired passwords once no workload can still run with them.
func (r *Reconciler) finishRotation(ctx context.Context, ns *corev1.Namespace, creds acl.User, rev string) (ctrl.Result, error) {
	pending, err := r.Roller.Pending(ctx, ns.Name, rev)
	if err != nil {
		return ctrl.Result{}, err
	}
	st, _ := StateFrom(ns)
	if len(pending) > 0 {
		logf.FromContext(ctx).V(1).Info("waiting for workloads to roll out before retiring old passwords", "pending", pending)
		// Back when the grace ends, if that comes before the next poll.
		poll := r.RolloutPoll
		if left := r.graceLeft(st, time.Now()); left > 0 {
			poll = min(poll, left)
		}
		return ctrl.Result{RequeueAfter: poll}, nil
	}
	if st.Digest != acl.HashPassword(creds.Password) {
		// The namespace moved on (another rotation): the next reconcile finishes that one.
		return ctrl.Result{RequeueAfter: r.RolloutPoll}, nil
	}
	if wait := r.applyWait(ns.Name, time.Now()); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	st.Retiring, st.RetiringSince = nil, time.Time{}
	creds.RetiredHashes = nil
	res, err := r.apply(ctx, ns, st, creds, nil)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := errors.Join(res.Err(), res.UserErrors()[creds.Name]); err != nil {
		r.forgetApplied(ns.Name)
		metrics.Errors.WithLabelValues(metrics.OpUpsert).Inc()
		return ctrl.Result{}, fmt.Errorf("remove retired passwords of %q: %w", creds.Name, err)
	}
	r.remember(ns.Name, appliedFor(ns, st, creds.Name))
	r.Events.Eventf(ns, nil, corev1.EventTypeNormal, ReasonRotationCompleted, "Rotate",
		"every workload restarted with the current Valkey password; older passwords of %q removed", creds.Name)
	return ctrl.Result{}, nil
}

// restoreSecret makes the Secret exactly what the operator writes for u, keeping labels and
// annotations that are not the operator's. An edit by anyone else is undone with a Warning
// Event; an immutable Secret (or one of another type) is deleted and created again.
func (r *Reconciler) restoreSecret(ctx context.Context, ns *corev1.Namespace, existing *corev1.Secret, u acl.User, why change) error {
	var drift []string
	if existing != nil {
		drift = SecretDrift(existing, u.Name, u.Password)
		if len(drift) == 0 {
			return nil
		}
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: decov1.ValkeyACLSecretName}}
	if existing != nil {
		s.Labels, s.Annotations = maps.Clone(existing.Labels), maps.Clone(existing.Annotations)
		s.OwnerReferences, s.ResourceVersion = existing.OwnerReferences, existing.ResourceVersion
	}
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	s.Labels[decov1.LabelManagedBy] = decov1.ManagedByValue
	maps.DeleteFunc(s.Annotations, func(k, _ string) bool { return strings.HasPrefix(k, OperatorAnnotationPrefix) })
	s.Type = corev1.SecretTypeOpaque
	s.Data = map[string][]byte{
		decov1.ValkeyACLUsernameKey: []byte(u.Name),
		decov1.ValkeyACLPasswordKey: []byte(u.Password),
	}
	var err error
	switch {
	case existing == nil:
		err = r.Client.Create(ctx, s)
	case (existing.Immutable != nil && *existing.Immutable) || existing.Type != corev1.SecretTypeOpaque:
		// Neither can be changed in place. The preconditions make sure the Secret deleted is the
		// one read above, not a newer one.
		uid, rv := existing.UID, existing.ResourceVersion
		err = r.Client.Delete(ctx, existing, client.Preconditions{UID: &uid, ResourceVersion: &rv})
		if err == nil || apierrors.IsNotFound(err) {
			s.ResourceVersion = ""
			err = r.Client.Create(ctx, s)
		}
	default:
		// Update carries the resourceVersion read above: a concurrent change fails instead of
		// being overwritten, and the retry starts from the newest state.
		err = r.Client.Update(ctx, s)
	}
	if err != nil {
		return fmt.Errorf("write Secret %s/%s: %w", ns.Name, s.Name, err)
	}
	// Deliberate changes (rotation, a lost password) rewrite the password; any other difference
	// is someone else's edit.
	if edited := slices.DeleteFunc(drift, func(f string) bool { return f == "password" && (why == rotated || why == issued) }); len(edited) > 0 {
		metrics.SecretsRestored.Inc()
		r.Events.Eventf(ns, nil, corev1.EventTypeWarning, ReasonSecretRestored, "Restore",
			"Secret %s was changed outside siteops (%s) and was restored; it is output only, edit the namespace's %s annotation to rotate",
			decov1.ValkeyACLSecretName, strings.Join(edited, ", "), decov1.AnnotationValkeyACLRotate)
	}
	return nil
}

func appendNew(list []string, h string) []string {
	if h == "" || slices.Contains(list, h) {
		return list
	}
	return append(list, h)
}
