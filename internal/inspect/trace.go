package inspect

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	mirrorv1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/inject"
	"github.com/siteops/siteops/internal/decofile/sources"
	"github.com/siteops/siteops/internal/mirror/sanitize"
)

// Link is one step of a trace: an object, or one aspect of one, with its state.
type Link struct {
	// What the link is: "pod", "workload", "decofile", "source", "stored", "pods", "rollout"…
	What string `json:"what"`
	// Object is Kind/name of the object the link reads.
	Object string `json:"object,omitempty"`
	// State of the link.
	State State `json:"state"`
	// Message says what the link holds or why it is not ready.
	Message string `json:"message,omitempty"`
	// Since is when the link last changed, when the object records it.
	Since *time.Time `json:"since,omitempty"`
}

// Healthy reports whether every link is Ready.
func Healthy(links []Link) bool {
	for _, l := range links {
		if l.State != StateReady {
			return false
		}
	}
	return len(links) > 0
}

// WhyDecofile says why a workload got the Decofile it has, from its inject annotation.
func WhyDecofile(annotations, labels map[string]string, namespace string) string {
	switch v := annotations[decov1.AnnotationInject]; v {
	case "":
		return "no " + decov1.AnnotationInject + " annotation: injected by hand or by an earlier version"
	case inject.InjectByDeploymentID:
		return fmt.Sprintf("%s=true: the Decofile whose deploymentId is %q (label %s)", decov1.AnnotationInject, labels[decov1.LabelDeploymentID], decov1.LabelDeploymentID)
	case inject.InjectDefault:
		return fmt.Sprintf("%s=default: the namespace's default %s", decov1.AnnotationInject, inject.DefaultDecofileName(namespace))
	default:
		return fmt.Sprintf("%s=%s: named by the annotation", decov1.AnnotationInject, v)
	}
}

// PodLink is a pod with its phase and readiness.
func PodLink(p *corev1.Pod) Link {
	n := podNode(p)
	return Link{What: "pod", Object: "Pod/" + p.Name, State: n.State, Message: n.Message, Since: timeOf(&p.CreationTimestamp)}
}

// DecofileTrace is the chain from a Decofile to its pods: the Decofile, its source and revision,
// the stored object, what the pods confirmed (and which are behind, and why), the rollout step.
// pod, when set, is the pod the trace started from: the pods link then says how that one is.
func DecofileTrace(d *decov1.Decofile, cm *corev1.ConfigMap, pod string) []Link {
	st := &d.Status
	s := Decofile(d)
	links := []Link{{What: "decofile", Object: "Decofile/" + d.Name, State: s.State, Message: s.Message, Since: s.LastChange}}

	src := Link{What: "source", State: StateReady, Message: sourceText(d)}
	if ready := meta.FindStatusCondition(st.Conditions, decov1.ConditionReady); ready == nil || !st.ContentStored() {
		src.State = s.State
		if ready != nil {
			src.Message += ": " + ready.Reason
		}
	} else if s.Revision != "" {
		src.Message += ", revision " + s.Revision
	}
	links = append(links, src)

	stored := storedNode(d, cm)
	links = append(links, Link{What: "stored", Object: stored.Kind + "/" + stored.Name, State: stored.State, Message: stored.Message, Since: timeOf(st.LastUpdated)})
	links = append(links, podsLink(d, pod))
	if ro := st.Rollout; ro != nil && ro.Steps > 0 {
		l := Link{What: "rollout", State: StateProgressing, Message: fmt.Sprintf("step %d/%d %s, %d pods updated", ro.Step, ro.Steps, ro.Phase, ro.Updated),
			Since: timeOf(ro.StartedAt)}
		switch ro.Phase {
		case "Succeeded":
			l.State = StateReady
		case "RolledBack", "Failed":
			l.State = StateFailing
			if ro.FailedID != "" {
				l.Message += ", rolled back " + ro.FailedID
			}
		}
		links = append(links, l)
	}
	return links
}

// sourceText names where a Decofile's content comes from.
func sourceText(d *decov1.Decofile) string { return sources.Describing.Describe(d) }

// podsLink is what the pods confirmed of the current content.
func podsLink(d *decov1.Decofile, pod string) Link {
	st := &d.Status
	l := Link{What: "pods", State: StateUnknown, Message: "no rollout recorded yet"}
	ro := st.Rollout
	if ro != nil {
		l.Since = timeOf(ro.FinishedAt)
	}
	n := meta.FindStatusCondition(st.Conditions, decov1.ConditionPodsNotified)
	switch {
	case d.Spec.Silent:
		l.State, l.Message = StateReady, "silent: pods are not notified, they load the content when they start"
		return l
	case n == nil || ro == nil:
		return l
	case n.Status == metav1.ConditionTrue && st.NotifiedHash == st.ContentHash:
		l.State = StateReady
		l.Message = fmt.Sprintf("%d/%d confirmed content %s", ro.Notified, ro.Total, short(st.ContentHash))
		if ro.Skipped > 0 {
			l.Message += fmt.Sprintf(" (%d skipped: not running or not ready)", ro.Skipped)
		}
	case n.Status == metav1.ConditionTrue:
		l.State = StateProgressing
		l.Message = fmt.Sprintf("pods confirmed content %s; the stored %s is not rolled out yet", orNone(short(st.NotifiedHash)), short(st.ContentHash))
	case n.Status == metav1.ConditionUnknown:
		l.State, l.Message = StateProgressing, fmt.Sprintf("%d/%d confirmed so far: %s", ro.Notified, ro.Total, n.Message)
	default:
		l.State, l.Message = StateFailing, fmt.Sprintf("%d/%d confirmed, %d failed: %s", ro.Notified, ro.Total, ro.Failed, n.Reason)
	}
	if by := byContent(ro.Confirmed, st.ContentHash); len(ro.Confirmed) > 1 || (len(ro.Confirmed) == 1 && ro.Confirmed[0].ContentHash != st.ContentHash) {
		l.Message += "; pods by content: " + by
	}
	var behind []string
	for _, b := range ro.Behind {
		behind = append(behind, b.Name+" ("+b.Reason+")")
	}
	if len(behind) > 0 {
		l.Message += "; behind: " + strings.Join(behind, ", ")
	}
	if pod == "" {
		return l
	}
	if i := slices.IndexFunc(ro.Behind, func(b decov1.PodBehind) bool { return b.Name == pod }); i >= 0 {
		b := ro.Behind[i]
		l.State, l.Message = StateFailing, fmt.Sprintf("pod %s is behind: %s", pod, b.Reason)
		if b.HTTPStatus != 0 {
			l.Message += fmt.Sprintf(" (HTTP %d after %d attempts)", b.HTTPStatus, b.Attempts)
		}
		if b.ConfirmedHash != "" {
			l.Message += "; it still serves content " + short(b.ConfirmedHash)
		}
	}
	return l
}

// byContent says how many pods last confirmed which content, as the rollout recorded it.
func byContent(counts []decov1.ConfirmedContent, stored string) string {
	parts := make([]string, 0, len(counts))
	for _, c := range counts {
		switch c.ContentHash {
		case stored:
			parts = append(parts, fmt.Sprintf("%d on the stored %s", c.Pods, short(c.ContentHash)))
		case "":
			parts = append(parts, fmt.Sprintf("%d not known", c.Pods))
		default:
			parts = append(parts, fmt.Sprintf("%d on %s", c.Pods, short(c.ContentHash)))
		}
	}
	return strings.Join(parts, ", ")
}

// orNone is s, or "none" when it is empty.
func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// TenantTrace is the chain of a tenant namespace's cache user: the state the operator keeps on
// the Namespace and the Secret the tenant's workloads read.
func TenantTrace(ns *corev1.Namespace, secret bool) []Link {
	s := Tenant(ns)
	links := []Link{{What: "tenant", Object: "Namespace/" + ns.Name, State: s.State, Message: s.Message, Since: s.LastChange}}
	sec := Link{What: "credentials", Object: "Secret/" + decov1.ValkeyACLSecretName, State: StateReady, Message: "holds the user's password"}
	if !secret {
		sec.State, sec.Message = StateProgressing, "not written yet"
	}
	return append(links, sec)
}

// RotationLink is the workloads link of a tenant whose earlier passwords are retiring since
// since: pending names the injected workloads still running pods started with one of them; err
// says why they could not be listed.
func RotationLink(pending []string, since time.Time, err error) Link {
	l := Link{What: "workloads", Since: timeOf(&metav1.Time{Time: since})}
	switch {
	case err != nil:
		l.State, l.Message = StateUnknown, "cannot tell which workloads hold an earlier password: "+err.Error()
	case len(pending) == 0:
		l.State, l.Message = StateReady, "every injected workload runs the current password; the earlier ones are removed next"
	default:
		l.State = StateProgressing
		l.Message = fmt.Sprintf("%d workload(s) still run pods started with an earlier password, which stays valid until they roll out: %s",
			len(pending), strings.Join(pending, ", "))
	}
	return l
}

// Rule is a WatchRule or ClusterWatchRule as a trace reads it.
type Rule struct {
	// Kind is WatchRule or ClusterWatchRule.
	Kind string
	// Name of the rule.
	Name string
	// Namespace of a WatchRule; empty for a ClusterWatchRule.
	Namespace string
	// Spec of the rule.
	Target mirrorv1.TargetReference
	// Rules are the resources the rule selects.
	Rules []mirrorv1.ResourceRule
}

// Selects reports whether r mirrors objects of gr.
func (r Rule) Selects(gr schema.GroupResource) bool {
	for _, rr := range r.Rules {
		group := slices.Contains(rr.APIGroups, "*") || slices.Contains(rr.APIGroups, gr.Group)
		resource := slices.Contains(rr.Resources, "*") || slices.Contains(rr.Resources, gr.Resource)
		if group && resource {
			return true
		}
	}
	return false
}

// TargetNamespace is the namespace of the GitTarget the rule commits to.
func (r Rule) TargetNamespace() string {
	if r.Target.Namespace != "" {
		return r.Target.Namespace
	}
	return r.Namespace
}

// CommitLookup is the link of the last commit that changed path on branch.
type CommitLookup func(branch, path string) Link

// MirrorTrace is the chain of a mirrored object: each rule that selects it, the target it
// commits to, and the file it is written to. targets holds the GitTargets the caller could read,
// by namespace/name. lastCommit, when set, adds after each target the last commit of the file.
func MirrorTrace(gr schema.GroupResource, namespace, name string, rules []Rule, targets map[string]*mirrorv1.GitTarget, lastCommit CommitLookup) []Link {
	var links []Link
	for _, r := range rules {
		if !r.Selects(gr) {
			continue
		}
		links = append(links, Link{What: "rule", Object: r.Kind + "/" + r.Name, State: StateReady, Message: "selects " + gr.String()})
		key := r.TargetNamespace() + "/" + r.Target.Name
		t, ok := targets[key]
		if !ok {
			links = append(links, Link{What: "target", Object: "GitTarget/" + key, State: StateUnknown, Message: "not found, or your credentials may not read it"})
			continue
		}
		s := GitTarget(t)
		file := sanitize.Path(t.Spec.Path, gr, namespace, name)
		msg := fmt.Sprintf("branch %s, file %s", t.Spec.Branch, file)
		if s.Revision != "" {
			msg += ", last push " + s.Revision
		}
		if s.State != StateReady {
			msg += ": " + s.Message
		}
		links = append(links, Link{What: "target", Object: "GitTarget/" + key, State: s.State, Message: msg, Since: s.LastChange})
		if lastCommit != nil {
			links = append(links, lastCommit(t.Spec.Branch, file))
		}
	}
	if len(links) == 0 {
		links = append(links, Link{What: "rule", State: StateUnknown, Message: "no rule you can read mirrors " + gr.String()})
	}
	return links
}
