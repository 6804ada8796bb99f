package provision

import (
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// applied is what the last successful apply of one namespace made every node hold, and the
// forced-resync request it answered. A reconcile that would apply the same again has nothing
// to do on the nodes: a tenant's edits of its Secret that change nothing the operator decides
// with (its labels, its annotations, a restore that puts the same password back) cost the
// Valkey nodes no work. A node that lost the user meanwhile is healed by the resync rounds and
// the failover watch, which do not depend on this record.
type applied struct {
	user, digest, retiring, sync string
}

// appliedFor returns the record of applying st as user, for the namespace's current
// forced-resync request.
func appliedFor(ns *corev1.Namespace, st State, user string) applied {
	return applied{
		user: user, digest: st.Digest, retiring: strings.Join(st.Retiring, ","),
		sync: ns.Annotations[decov1.AnnotationValkeyACLSync],
	}
}

// stateRecorded reports whether ns's annotations already hold st.
func stateRecorded(ns *corev1.Namespace, st State) bool {
	have := maps.Clone(ns.Annotations)
	if have == nil {
		have = map[string]string{}
	}
	want := maps.Clone(have)
	st.Apply(want)
	return maps.Equal(have, want)
}

// wasApplied reports whether the last successful apply of namespace was a.
func (r *Reconciler) wasApplied(namespace string, a applied) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	last, ok := r.applied[namespace]
	return ok && last == a
}

// remember records a successful apply of namespace.
func (r *Reconciler) remember(namespace string, a applied) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.applied == nil {
		r.applied = map[string]applied{}
	}
	r.applied[namespace] = a
}

// forgetApplied drops the record, so the next reconcile applies again.
func (r *Reconciler) forgetApplied(namespace string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.applied, namespace)
}

// forgetNamespace drops everything kept about a namespace that is gone or opted out.
func (r *Reconciler) forgetNamespace(namespace string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.applied, namespace)
	delete(r.lastApply, namespace)
}

// ApplyInterval is the shortest time between two applies of one namespace's user (a Namespace
// state write, the Secret, the isolation proof and ACL SETUSER on every node), whatever asks
// for them: Secret edits, their conflicts' retries, annotation changes. A tenant that keeps
// changing its Secret gets one apply per interval; the rest wait for the next one.
const ApplyInterval = time.Second

// applyWait returns how long namespace must wait before its next apply, or 0 and counts this
// one.
func (r *Reconciler) applyWait(namespace string, now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if last, ok := r.lastApply[namespace]; ok && now.Sub(last) < ApplyInterval && !last.After(now) {
		return last.Add(ApplyInterval).Sub(now)
	}
	if r.lastApply == nil {
		r.lastApply = map[string]time.Time{}
	}
	r.lastApply[namespace] = now
	return 0
}
