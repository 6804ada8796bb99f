package provision

import (
	"context"
	"fmt"
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
	"github.com/siteops/siteops/internal/tenant/acl"
	"github.com/siteops/siteops/internal/tenant/metrics"
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
	// Client reads namespaces (cached) and writes namespaces and Secrets.
	Client client.Client
	// Secrets reads Secrets without a cluster-wide cache.
	Secrets client.Reader
	// Nodes applies and removes ACL users on the Valkey nodes.
	Nodes Nodes
	// Roller restarts the namespace's workloads after a credential change.
	Roller *rollout.Roller
	// Events records Events on namespaces.
	Events Recorder
	// AdminUsername is reserved: no tenant may get it.
	AdminUsername string
	// DeleteTimeout bounds how long an unreachable Valkey holds a namespace's finalizer.
	DeleteTimeout time.Duration
	// RolloutPoll is how often a rotation checks whether workloads finished rolling out.
	RolloutPoll time.Duration

	mu           sync.Mutex
	firstDeletes map[string]time.Time
}

// Reconcile brings one namespace's ACL user, Secret and finalizer in line with its annotations.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var ns corev1.Namespace
	if err := r.Client.Get(ctx, req.NamespacedName, &ns); err != nil {
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
	if Reserved(user, r.AdminUsername) {
		r.Events.Eventf(&ns, nil, corev1.EventTypeWarning, ReasonReservedUsername, "Refuse",
			"username %q is reserved; rename the namespace to get a Valkey ACL user", user)
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
	return r.provision(ctx, &ns, user)
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

func (r *Reconciler) provision(ctx context.Context, ns *corev1.Namespace, user string) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	secret := &corev1.Secret{}
	key := client.ObjectKey{Namespace: ns.Name, Name: decov1.ValkeyACLSecretName}
	if err := r.Secrets.Get(ctx, key, secret); err != nil {
		if !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("read Secret %s: %w", key, err)
		}
		secret = nil
	}
	creds, ok := CredentialsFrom(secret, user)
	changed := false
	rotate := ns.Annotations[decov1.AnnotationValkeyACLRotate]
	switch {
	case !ok:
		// New tenant, or its Secret was deleted or emptied: new credentials. Passwords the user
		// still has on the master stay valid until the workloads restart, so no pod is locked out.
		var err error
		if creds, err = r.newCredentials(ctx, user, nil); err != nil {
			return ctrl.Result{}, err
		}
		changed = true
	case rotate != "" && rotate != secret.Annotations[AnnotationRotated]:
		var err error
		if creds, err = r.newCredentials(ctx, user, append(creds.RetiredHashes, acl.HashPassword(creds.Password))); err != nil {
			return ctrl.Result{}, err
		}
		changed = true
	}
	if changed {
		// The Secret is written first: it is the source of truth every later step is derived from.
		if err := r.writeSecret(ctx, ns, secret, creds, rotate); err != nil {
			return ctrl.Result{}, err
		}
	}
	res := r.Nodes.Sync(ctx, "", "", []acl.User{creds})
	if err := res.Err(); err != nil {
		metrics.Errors.WithLabelValues(metrics.OpUpsert).Inc()
		r.Events.Eventf(ns, nil, corev1.EventTypeWarning, ReasonProvisionFailed, "Provision",
			"could not apply Valkey ACL user %q on every node: %v", user, err)
		return ctrl.Result{}, fmt.Errorf("apply ACL user %q: %w", user, err)
	}
	switch {
	case changed && secret == nil:
		metrics.Provisioned.Inc()
		r.Events.Eventf(ns, nil, corev1.EventTypeNormal, ReasonProvisioned, "Provision",
			"Valkey ACL user %q provisioned on %d nodes", user, len(res.Nodes))
	case changed && rotate != "" && secret != nil && rotate != secret.Annotations[AnnotationRotated]:
		r.Events.Eventf(ns, nil, corev1.EventTypeNormal, ReasonRotated, "Rotate",
			"Valkey password of %q rotated; the old one stays valid until the workloads have restarted", user)
	case changed:
		metrics.Provisioned.Inc()
		r.Events.Eventf(ns, nil, corev1.EventTypeNormal, ReasonProvisioned, "Provision",
			"Valkey credentials of %q were missing from Secret %s and were issued again", user, decov1.ValkeyACLSecretName)
	case len(res.MissingUsers()) > 0:
		metrics.SelfHealed.Inc()
		var nodes []string
		for _, n := range res.Nodes {
			if len(n.Missing) > 0 {
				nodes = append(nodes, n.Node.Addr)
			}
		}
		log.Info("re-provisioned a lost ACL user", "user", user, "nodes", nodes)
		r.Events.Eventf(ns, nil, corev1.EventTypeNormal, ReasonSelfHealed, "Heal",
			"Valkey ACL user %q was missing on %s and was provisioned again", user, strings.Join(nodes, ", "))
	}
	rev := Revision(creds)
	if changed || len(creds.RetiredHashes) > 0 {
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

// finishRotation drops the retired passwords once no workload can still run with them.
func (r *Reconciler) finishRotation(ctx context.Context, ns *corev1.Namespace, creds acl.User, rev string) (ctrl.Result, error) {
	pending, err := r.Roller.Pending(ctx, ns.Name, rev)
	if err != nil {
		return ctrl.Result{}, err
	}
	if len(pending) > 0 {
		logf.FromContext(ctx).V(1).Info("waiting for workloads to roll out before retiring old passwords", "pending", pending)
		return ctrl.Result{RequeueAfter: r.RolloutPoll}, nil
	}
	secret := &corev1.Secret{}
	if err := r.Secrets.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: decov1.ValkeyACLSecretName}, secret); err != nil {
		return ctrl.Result{}, fmt.Errorf("read Secret %s/%s: %w", ns.Name, decov1.ValkeyACLSecretName, err)
	}
	patch := client.MergeFromWithOptions(secret.DeepCopy(), client.MergeFromWithOptimisticLock{})
	delete(secret.Annotations, AnnotationRetiring)
	if err := r.Client.Patch(ctx, secret, patch); err != nil {
		return ctrl.Result{}, fmt.Errorf("clear retired passwords on Secret %s/%s: %w", ns.Name, secret.Name, err)
	}
	creds.RetiredHashes = nil
	if err := r.Nodes.Sync(ctx, "", "", []acl.User{creds}).Err(); err != nil {
		metrics.Errors.WithLabelValues(metrics.OpUpsert).Inc()
		return ctrl.Result{}, fmt.Errorf("remove retired passwords of %q: %w", creds.Name, err)
	}
	r.Events.Eventf(ns, nil, corev1.EventTypeNormal, ReasonRotationCompleted, "Rotate",
		"every workload restarted with the current Valkey password; older passwords of %q removed", creds.Name)
	return ctrl.Result{}, nil
}

// newCredentials makes a new password for user and keeps retired plus whatever passwords the
// user has on the master valid.
func (r *Reconciler) newCredentials(ctx context.Context, user string, retired []string) (acl.User, error) {
	pass, err := acl.NewPassword()
	if err != nil {
		return acl.User{}, err
	}
	nodes, err := r.Nodes.Discover(ctx, "")
	if err != nil {
		metrics.Errors.WithLabelValues(metrics.OpCheck).Inc()
		return acl.User{}, err
	}
	have, err := r.Nodes.PasswordHashes(ctx, nodes[0].Addr, user)
	if err != nil {
		metrics.Errors.WithLabelValues(metrics.OpCheck).Inc()
		return acl.User{}, fmt.Errorf("read existing passwords of %q on %s: %w", user, nodes[0].Addr, err)
	}
	for _, h := range append(retired, have...) {
		if !slices.Contains(retired, h) {
			retired = append(retired, h)
		}
	}
	return acl.User{Name: user, Password: pass, RetiredHashes: retired}, nil
}

func (r *Reconciler) writeSecret(ctx context.Context, ns *corev1.Namespace, existing *corev1.Secret, u acl.User, rotated string) error {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: decov1.ValkeyACLSecretName}}
	if existing != nil {
		s = existing.DeepCopy()
	}
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	s.Labels[decov1.LabelManagedBy] = decov1.ManagedByValue
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	if len(u.RetiredHashes) > 0 {
		s.Annotations[AnnotationRetiring] = strings.Join(u.RetiredHashes, ",")
	} else {
		delete(s.Annotations, AnnotationRetiring)
	}
	if rotated != "" {
		s.Annotations[AnnotationRotated] = rotated
	}
	s.Type = corev1.SecretTypeOpaque
	s.Data = map[string][]byte{
		decov1.ValkeyACLUsernameKey: []byte(u.Name),
		decov1.ValkeyACLPasswordKey: []byte(u.Password),
	}
	var err error
	if existing == nil {
		err = r.Client.Create(ctx, s)
	} else {
		// Update carries the resourceVersion read above: a concurrent change fails instead of
		// being overwritten.
		err = r.Client.Update(ctx, s)
	}
	if err != nil {
		return fmt.Errorf("write Secret %s/%s: %w", ns.Name, s.Name, err)
	}
	return nil
}

// deprovision removes the user from every node, then the Secret (on opt-out) and the finalizer.
// An unreachable Valkey is retried until the delete timeout, then given up with a Warning.
func (r *Reconciler) deprovision(ctx context.Context, ns *corev1.Namespace) (ctrl.Result, error) {
	user := Username(ns.Name)
	secret := &corev1.Secret{}
	err := r.Secrets.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: decov1.ValkeyACLSecretName}, secret)
	switch {
	case err == nil:
		if name := string(secret.Data[decov1.ValkeyACLUsernameKey]); name != "" && !Reserved(name, r.AdminUsername) {
			user = name
		}
	case apierrors.IsNotFound(err):
		secret = nil
	default:
		return ctrl.Result{}, fmt.Errorf("read Secret %s/%s: %w", ns.Name, decov1.ValkeyACLSecretName, err)
	}
	if err := r.Nodes.Delete(ctx, []string{user}).Err(); err != nil {
		metrics.Errors.WithLabelValues(metrics.OpDelete).Inc()
		deadline := deleteDeadline(ns, r.firstDelete(ns.Name), r.DeleteTimeout)
		if left := time.Until(deadline); left > 0 {
			r.Events.Eventf(ns, nil, corev1.EventTypeWarning, ReasonDeleteFailed, "Delete",
				"could not delete Valkey ACL user %q (retrying for %s): %v", user, left.Round(time.Second), err)
			return ctrl.Result{RequeueAfter: min(left, r.retryDelay(ns.Name))}, nil
		}
		r.Events.Eventf(ns, nil, corev1.EventTypeWarning, ReasonDeleteTimedOut, "Delete",
			"gave up deleting Valkey ACL user %q after %s; remove it by hand (ACL DELUSER %s on every node): %v",
			user, r.DeleteTimeout, user, err)
	} else {
		metrics.Deleted.Inc()
		r.Events.Eventf(ns, nil, corev1.EventTypeNormal, ReasonDeleted, "Delete", "Valkey ACL user %q deleted from every node", user)
	}
	if secret != nil && ns.DeletionTimestamp == nil {
		if err := r.Client.Delete(ctx, secret); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, fmt.Errorf("delete Secret %s/%s: %w", ns.Name, secret.Name, err)
		}
	}
	patch := client.MergeFromWithOptions(ns.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(ns, Finalizer)
	if err := r.Client.Patch(ctx, ns, patch); err != nil {
		return ctrl.Result{}, fmt.Errorf("remove finalizer from namespace %s: %w", ns.Name, client.IgnoreNotFound(err))
	}
	r.forgetDelete(ns.Name)
	r.countTenants(ctx)
	return ctrl.Result{}, nil
}

func (r *Reconciler) firstDelete(ns string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.firstDeletes == nil {
		r.firstDeletes = map[string]time.Time{}
	}
	t, ok := r.firstDeletes[ns]
	if !ok {
		t = time.Now()
		r.firstDeletes[ns] = t
	}
	return t
}

// retryDelay backs off from 1s, doubling with the time already spent, up to 30s.
func (r *Reconciler) retryDelay(ns string) time.Duration {
	spent := time.Since(r.firstDelete(ns))
	return min(max(time.Second, spent), 30*time.Second)
}

func (r *Reconciler) forgetDelete(ns string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.firstDeletes, ns)
}

// countTenants sets the tenants gauge to the number of namespaces holding the finalizer. It is
// called when a finalizer comes or goes, not on every reconcile, because it lists namespaces.
func (r *Reconciler) countTenants(ctx context.Context) {
	n, err := CountTenants(ctx, r.Client)
	if err == nil {
		metrics.Tenants.Set(float64(n))
	}
}

// CountTenants counts namespaces that hold the tenant finalizer.
func CountTenants(ctx context.Context, c client.Reader) (int, error) {
	var list corev1.NamespaceList
	if err := c.List(ctx, &list); err != nil {
		return 0, fmt.Errorf("list namespaces: %w", err)
	}
	n := 0
	for i := range list.Items {
		if slices.Contains(list.Items[i].Finalizers, Finalizer) {
			n++
		}
	}
	return n, nil
}
