// Package inspect turns siteops objects into what a person reads about them: one Summary per
// object (its state, revision, last change, pods confirmed, rollout step, reason) and counts per
// kind. Every view (the CLI's get and stats) is built from these, so the views agree.
package inspect

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	mirrorv1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/tenant/provision"
)

// Kind names, as `siteops get` spells them.
const (
	KindDecofile  = "Decofile"
	KindGitTarget = "GitTarget"
	KindWatchRule = "WatchRule"
	KindTenant    = "Tenant"
)

// State is how an object is doing, in the words a person uses.
type State string

const (
	// StateFailing means the object needs attention (a delivery or push failed, pods are behind).
	StateFailing State = "Failing"
	// StateProgressing means work is under way (content being stored, a rollout, a rotation).
	StateProgressing State = "Progressing"
	// StateSuspended means delivery or mirroring is stopped on purpose (spec.suspend).
	StateSuspended State = "Suspended"
	// StateUnknown means the status does not say yet (never reconciled, or a state siteops
	// does not know).
	StateUnknown State = "Unknown"
	// StateReady means the object's last change is done everywhere it goes.
	StateReady State = "Ready"
)

// rank orders states for display: what needs attention first.
func (s State) rank() int {
	switch s {
	case StateFailing:
		return 0
	case StateProgressing:
		return 1
	case StateSuspended:
		return 2
	case StateUnknown:
		return 3
	}
	return 4
}

// Pods counts the pods that confirmed the current content of a Decofile.
type Pods struct {
	// Confirmed pods loaded the current content.
	Confirmed int32 `json:"confirmed"`
	// Total pods the rollout addresses.
	Total int32 `json:"total"`
}

// Field is one kind-specific value shown in wide output.
type Field struct {
	// Name is the column header.
	Name string `json:"name"`
	// Value is the cell.
	Value string `json:"value"`
}

// Summary is one object as a person reads it.
type Summary struct {
	// Kind is one of the Kind constants.
	Kind string `json:"kind"`
	// Namespace of the object; empty for cluster-scoped ones. A tenant's namespace is its Name.
	Namespace string `json:"namespace,omitempty"`
	// Name of the object.
	Name string `json:"name"`
	// State sums up the conditions.
	State State `json:"state"`
	// Reason is the machine-readable reason behind State.
	Reason string `json:"reason,omitempty"`
	// Message says what is happening, in one line.
	Message string `json:"message,omitempty"`
	// Revision is what the object holds now: a commit, a content hash, a password revision.
	Revision string `json:"revision,omitempty"`
	// LastChange is when the last delivery, push or rotation happened.
	LastChange *time.Time `json:"lastChange,omitempty"`
	// Pods that confirmed the current content (Decofiles).
	Pods *Pods `json:"pods,omitempty"`
	// Step of a progressive rollout, "2/4 Pausing" (Decofiles).
	Step string `json:"step,omitempty"`
	// Bytes stored (Decofiles).
	Bytes int64 `json:"bytes,omitempty"`
	// Pending changes not yet pushed (GitTargets).
	Pending int32 `json:"pending,omitempty"`
	// Created is the object's creation time.
	Created time.Time `json:"created"`
	// Conditions maps each condition type to its status, for status selectors.
	Conditions map[string]metav1.ConditionStatus `json:"conditions,omitempty"`
	// Wide are kind-specific values shown with -o wide.
	Wide []Field `json:"wide,omitempty"`
}

// Ref is "kind/namespace/name", the way messages name the object.
func (s Summary) Ref() string {
	if s.Namespace == "" || s.Kind == KindTenant {
		return strings.ToLower(s.Kind) + "/" + s.Name
	}
	return strings.ToLower(s.Kind) + "/" + s.Namespace + "/" + s.Name
}

// Sort orders summaries for display: failing first, then in progress, unknown, ready; by
// namespace and name within a state.
func Sort(ss []Summary) {
	slices.SortStableFunc(ss, func(a, b Summary) int {
		if d := a.State.rank() - b.State.rank(); d != 0 {
			return d
		}
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// kstatusOf computes kstatus from the parts of an object it reads (generation, deletion,
// observedGeneration, conditions), without converting the whole object: a Decofile's inline
// content can be megabytes.
func kstatusOf(om metav1.ObjectMeta, observedGeneration int64, conds []metav1.Condition) *status.Result {
	md := map[string]any{"generation": om.Generation}
	if om.DeletionTimestamp != nil {
		md["deletionTimestamp"] = om.DeletionTimestamp.UTC().Format(time.RFC3339)
	}
	cs := make([]any, 0, len(conds))
	for _, c := range conds {
		cs = append(cs, map[string]any{"type": c.Type, "status": string(c.Status), "reason": c.Reason, "message": c.Message})
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "siteops.dev/v1", "kind": "Object", "metadata": md,
		"status": map[string]any{"observedGeneration": observedGeneration, "conditions": cs},
	}}
	res, err := status.Compute(u)
	if err != nil {
		return &status.Result{Status: status.UnknownStatus, Message: err.Error()}
	}
	return res
}

// stateOf maps a kstatus result to a State.
func stateOf(r *status.Result) State {
	switch r.Status {
	case status.CurrentStatus:
		return StateReady
	case status.FailedStatus:
		return StateFailing
	case status.InProgressStatus, status.TerminatingStatus:
		return StateProgressing
	}
	return StateUnknown
}

// conditionMap is each condition's status by type.
func conditionMap(conds []metav1.Condition) map[string]metav1.ConditionStatus {
	m := make(map[string]metav1.ConditionStatus, len(conds))
	for _, c := range conds {
		m[c.Type] = c.Status
	}
	return m
}

// fromConditions fills State, Reason and Message from kstatus and the Ready condition.
func fromConditions(s *Summary, om metav1.ObjectMeta, observedGeneration int64, conds []metav1.Condition) {
	r := kstatusOf(om, observedGeneration, conds)
	s.State, s.Message = stateOf(r), r.Message
	s.Conditions = conditionMap(conds)
	ready := meta.FindStatusCondition(conds, "Ready")
	switch {
	case ready == nil && len(conds) == 0 && observedGeneration == 0:
		s.State, s.Reason, s.Message = StateUnknown, "NotReconciled", "not reconciled yet"
	case ready == nil:
	case ready.Status == metav1.ConditionFalse:
		// kstatus reads Ready=False as "in progress"; a Ready=False with a reason that is not
		// Progressing is a failure a person must see.
		s.Reason, s.Message = ready.Reason, ready.Message
		if ready.Reason != decov1.ReasonProgressing {
			s.State = StateFailing
		}
	default:
		s.Reason, s.Message = ready.Reason, ready.Message
	}
	for _, c := range conds {
		if c.Type == "Stalled" && c.Status == metav1.ConditionTrue {
			s.State, s.Reason, s.Message = StateFailing, c.Reason, c.Message
		}
	}
}

// timeOf returns t's time, nil when t is nil.
func timeOf(t *metav1.Time) *time.Time {
	if t == nil || t.IsZero() {
		return nil
	}
	v := t.Time
	return &v
}

// Decofile summarises a Decofile: its delivery (Ready) and its rollout to pods (PodsNotified).
func Decofile(d *decov1.Decofile) Summary {
	st := &d.Status
	s := Summary{Kind: KindDecofile, Namespace: d.Namespace, Name: d.Name, Created: d.CreationTimestamp.Time,
		LastChange: timeOf(st.LastUpdated), Bytes: st.StoredBytes}
	fromConditions(&s, d.ObjectMeta, st.ObservedGeneration, st.Conditions)
	s.Revision = decofileRevision(st)
	if ro := st.Rollout; ro != nil {
		s.Pods = &Pods{Confirmed: ro.Notified, Total: ro.Total}
		if ro.Steps > 0 {
			s.Step = fmt.Sprintf("%d/%d", ro.Step, ro.Steps)
			if ro.Phase != "" {
				s.Step += " " + ro.Phase
			}
		}
	}
	// Stored is not delivered: the pods' confirmations decide once the content is stored.
	if n := meta.FindStatusCondition(st.Conditions, decov1.ConditionPodsNotified); n != nil && s.State == StateReady {
		switch n.Status {
		case metav1.ConditionFalse:
			s.State, s.Reason, s.Message = StateFailing, n.Reason, n.Message
		case metav1.ConditionUnknown:
			s.State, s.Reason, s.Message = StateProgressing, n.Reason, n.Message
		}
	}
	if d.Spec.Suspend {
		s.State, s.Reason, s.Message = StateSuspended, "Suspended", "suspended: nothing is read, stored or notified until it is resumed"
	}
	where := st.ConfigMapName
	if st.S3URL != "" {
		where = st.S3URL
	}
	s.Wide = []Field{
		{Name: "SOURCE", Value: string(d.Spec.Source)},
		{Name: "TARGET", Value: string(d.TargetOrDefault())},
		{Name: "FORMAT", Value: string(st.Format)},
		{Name: "SIZE", Value: ByteSize(st.StoredBytes)},
		{Name: "STORED", Value: where},
		{Name: "HISTORY", Value: resultsText(st.History, func(r decov1.RolloutRecord) (string, int32) { return r.Result, r.Count })},
	}
	return s
}

// resultsText is the results of the last rollouts or pushes, newest first, a result repeated
// in a row shown with its count: "Succeeded,Failed×3".
func resultsText[R any](h []R, of func(R) (string, int32)) string {
	parts := make([]string, 0, len(h))
	for _, r := range h {
		result, count := of(r)
		if count > 1 {
			result += fmt.Sprintf("×%d", count)
		}
		parts = append(parts, result)
	}
	return strings.Join(parts, ",")
}

// decofileRevision is the short commit for git and github sources, else the content hash's start.
func decofileRevision(st *decov1.DecofileStatus) string {
	if st.ShortCommit != "" {
		return st.ShortCommit
	}
	if len(st.ContentHash) > 12 {
		return "sha256:" + st.ContentHash[:12]
	}
	return st.ContentHash
}

// GitTarget summarises a mirror target: its watches and pushes (Ready) and whether its cursors
// survive a restart (CursorsDurable).
func GitTarget(g *mirrorv1.GitTarget) Summary {
	st := &g.Status
	s := Summary{Kind: KindGitTarget, Namespace: g.Namespace, Name: g.Name, Created: g.CreationTimestamp.Time,
		LastChange: timeOf(st.LastPushTime), Pending: st.PendingWrites}
	fromConditions(&s, g.ObjectMeta, st.ObservedGeneration, st.Conditions)
	if len(st.LastPushedCommit) > 7 {
		s.Revision = st.LastPushedCommit[:7]
	} else {
		s.Revision = st.LastPushedCommit
	}
	if c := meta.FindStatusCondition(st.Conditions, mirrorv1.ConditionCursorsDurable); c != nil && c.Status == metav1.ConditionFalse && s.State == StateReady {
		s.State, s.Reason, s.Message = StateFailing, c.Reason, c.Message
	}
	if g.Spec.Suspend {
		s.State, s.Reason, s.Message = StateSuspended, "Suspended", "suspended: nothing is committed until it is resumed; the watch cursors are kept"
	}
	s.Wide = []Field{
		{Name: "PROVIDER", Value: g.Spec.ProviderRef.Name},
		{Name: "BRANCH", Value: g.Spec.Branch},
		{Name: "PATH", Value: g.Spec.Path},
		{Name: "STREAMS", Value: fmt.Sprint(st.WatchedStreams)},
		{Name: "PENDING", Value: fmt.Sprint(st.PendingWrites)},
		{Name: "HISTORY", Value: resultsText(st.History, func(r mirrorv1.PushRecord) (string, int32) { return r.Result, r.Count })},
	}
	return s
}

// WatchRule summarises a rule that selects resources to mirror.
func WatchRule(w *mirrorv1.WatchRule) Summary {
	st := &w.Status
	s := Summary{Kind: KindWatchRule, Namespace: w.Namespace, Name: w.Name, Created: w.CreationTimestamp.Time}
	fromConditions(&s, w.ObjectMeta, st.ObservedGeneration, st.Conditions)
	target := w.Spec.TargetRef.Name
	if w.Spec.TargetRef.Namespace != "" {
		target = w.Spec.TargetRef.Namespace + "/" + target
	}
	s.Revision = strings.Join(st.Resources, ",")
	if w.Spec.Suspend {
		s.State, s.Reason, s.Message = StateSuspended, "Suspended", "suspended: its watches are stopped until it is resumed; files and cursors are kept"
	}
	s.Wide = []Field{
		{Name: "TARGET", Value: target},
		{Name: "RESOURCES", Value: strings.Join(st.Resources, ",")},
		{Name: "EXCLUDED", Value: fmt.Sprint(len(st.Excluded))},
	}
	return s
}

// Tenant summarises a namespace's cache user from the state the operator keeps on the Namespace
// (the authority on passwords; tenants cannot write it).
func Tenant(ns *corev1.Namespace) Summary {
	s := Summary{Kind: KindTenant, Name: ns.Name, Namespace: ns.Name, Created: ns.CreationTimestamp.Time}
	st, err := provision.StateFrom(ns)
	user := provision.Username(ns.Name)
	ready := metav1.ConditionTrue
	switch {
	case ns.DeletionTimestamp != nil:
		s.State, s.Reason, s.Message, ready = StateProgressing, "Deleting", "removing user "+user+" from every node", metav1.ConditionFalse
	case err != nil:
		s.State, s.Reason, s.Message, ready = StateFailing, "InvalidState", err.Error(), metav1.ConditionFalse
	case st.Digest == "":
		s.State, s.Reason, s.Message, ready = StateProgressing, "NotProvisioned", "user "+user+" not provisioned yet", metav1.ConditionUnknown
	case len(st.Retiring) > 0:
		s.State, s.Reason = StateProgressing, "Rotating"
		s.Message = fmt.Sprintf("user %s: %d earlier password(s) valid until the workloads roll out", user, len(st.Retiring))
	default:
		s.State, s.Reason, s.Message = StateReady, provision.ReasonProvisioned, "user "+user+" provisioned"
	}
	if st.Digest != "" {
		s.Revision = st.Digest[:12]
	}
	if !st.RetiringSince.IsZero() {
		t := st.RetiringSince
		s.LastChange = &t
	}
	s.Conditions = map[string]metav1.ConditionStatus{"Ready": ready}
	s.Wide = []Field{
		{Name: "USER", Value: user},
		{Name: "RETIRING", Value: fmt.Sprint(len(st.Retiring))},
		{Name: "ROTATED", Value: st.Rotated},
	}
	return s
}

// WideFields are the names of kind's wide fields, in the order summaries hold them.
func WideFields(kind string) []string {
	var s Summary
	switch kind {
	case KindDecofile:
		s = Decofile(&decov1.Decofile{})
	case KindGitTarget:
		s = GitTarget(&mirrorv1.GitTarget{})
	case KindWatchRule:
		s = WatchRule(&mirrorv1.WatchRule{})
	case KindTenant:
		s = Tenant(&corev1.Namespace{})
	}
	names := make([]string, 0, len(s.Wide))
	for _, f := range s.Wide {
		names = append(names, f.Name)
	}
	return names
}

// ByteSize is n in B, KiB or MiB, as a person reads sizes.
func ByteSize(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%dB", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
}
