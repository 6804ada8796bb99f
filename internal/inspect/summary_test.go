package inspect_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	mirrorv1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/inspect"
	"github.com/siteops/siteops/internal/tenant/provision"
)

func decofile(gen, observed int64, conds ...metav1.Condition) *decov1.Decofile {
	d := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "shop", Generation: gen}}
	d.Status.ObservedGeneration = observed
	for _, c := range conds {
		meta.SetStatusCondition(&d.Status.Conditions, c)
	}
	return d
}

func c(typ string, s metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: s, Reason: reason, Message: typ + " " + reason}
}

func TestDecofileState(t *testing.T) {
	T, F, U := metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown
	for _, tc := range []struct {
		name   string
		d      *decov1.Decofile
		state  inspect.State
		reason string
	}{
		{"never reconciled", decofile(1, 0), inspect.StateUnknown, "NotReconciled"},
		{"stored and confirmed", decofile(1, 1, c("Ready", T, decov1.ReasonSucceeded), c(decov1.ConditionPodsNotified, T, decov1.ReasonNotificationSucceeded)), inspect.StateReady, decov1.ReasonSucceeded},
		{"stored, pods behind", decofile(1, 1, c("Ready", T, decov1.ReasonSucceeded), c(decov1.ConditionPodsNotified, F, decov1.ReasonNotificationFailed)), inspect.StateFailing, decov1.ReasonNotificationFailed},
		{"stored, rolling out", decofile(1, 1, c("Ready", T, decov1.ReasonSucceeded), c(decov1.ConditionPodsNotified, U, decov1.ReasonNotificationInProgress)), inspect.StateProgressing, decov1.ReasonNotificationInProgress},
		{"a newer spec not yet seen", decofile(2, 1, c("Ready", T, decov1.ReasonSucceeded)), inspect.StateProgressing, decov1.ReasonSucceeded},
		{"fetching", decofile(1, 1, c("Ready", F, decov1.ReasonProgressing), c(decov1.ConditionReconciling, T, decov1.ReasonProgressing)), inspect.StateProgressing, decov1.ReasonProgressing},
		{"too large", decofile(1, 1, c("Ready", F, decov1.ReasonTooLarge)), inspect.StateFailing, decov1.ReasonTooLarge},
		{"stalled", decofile(1, 1, c("Ready", F, decov1.ReasonTooLarge), c(decov1.ConditionStalled, T, decov1.ReasonTooLarge)), inspect.StateFailing, decov1.ReasonTooLarge},
	} {
		s := inspect.Decofile(tc.d)
		if s.State != tc.state || s.Reason != tc.reason {
			t.Errorf("%s: %s/%s, want %s/%s", tc.name, s.State, s.Reason, tc.state, tc.reason)
		}
	}
}

func TestDecofileRevisionAndRollout(t *testing.T) {
	d := decofile(1, 1, c("Ready", metav1.ConditionTrue, decov1.ReasonSucceeded))
	d.Status.ContentHash = "0123456789abcdef0123"
	if s := inspect.Decofile(d); s.Revision != "sha256:0123456789ab" || s.Pods != nil || s.Step != "" {
		t.Errorf("inline: %+v", s)
	}
	d.Status.ShortCommit = "abc1234"
	d.Status.Rollout = &decov1.RolloutStatus{Total: 10, Notified: 4, Step: 1, Steps: 3, Phase: "Pausing"}
	if s := inspect.Decofile(d); s.Revision != "abc1234" || *s.Pods != (inspect.Pods{Confirmed: 4, Total: 10}) || s.Step != "1/3 Pausing" {
		t.Errorf("git with a rollout: %+v", s)
	}
}

func TestGitTargetCursorsNotDurableIsFailing(t *testing.T) {
	g := &mirrorv1.GitTarget{ObjectMeta: metav1.ObjectMeta{Name: "t", Generation: 1}}
	g.Status.ObservedGeneration = 1
	meta.SetStatusCondition(&g.Status.Conditions, c("Ready", metav1.ConditionTrue, "Pushed"))
	if s := inspect.GitTarget(g); s.State != inspect.StateReady {
		t.Fatalf("ready target: %+v", s)
	}
	meta.SetStatusCondition(&g.Status.Conditions, c(mirrorv1.ConditionCursorsDurable, metav1.ConditionFalse, "RedisUnavailable"))
	if s := inspect.GitTarget(g); s.State != inspect.StateFailing || s.Reason != "RedisUnavailable" {
		t.Fatalf("cursors not durable: %+v", s)
	}
}

func TestTenantState(t *testing.T) {
	ns := func(a map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sites-shop", Annotations: a}}
	}
	const d = "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"
	for _, tc := range []struct {
		a      map[string]string
		state  inspect.State
		reason string
	}{
		{map[string]string{}, inspect.StateProgressing, "NotProvisioned"},
		{map[string]string{provision.AnnotationPasswordDigest: d}, inspect.StateReady, provision.ReasonProvisioned},
		{map[string]string{provision.AnnotationPasswordDigest: d, provision.AnnotationRetiring: strings.Repeat("ab", 32), provision.AnnotationRetiringSince: time.Now().Format(time.RFC3339)}, inspect.StateProgressing, "Rotating"},
		{map[string]string{provision.AnnotationPasswordDigest: "not-a-digest"}, inspect.StateFailing, "InvalidState"},
	} {
		s := inspect.Tenant(ns(tc.a))
		if s.State != tc.state || s.Reason != tc.reason {
			t.Errorf("%v: %s/%s, want %s/%s", tc.a, s.State, s.Reason, tc.state, tc.reason)
		}
	}
}

func TestSortPutsAttentionFirst(t *testing.T) {
	ss := []inspect.Summary{
		{Name: "b", State: inspect.StateReady}, {Name: "a", State: inspect.StateReady},
		{Name: "z", State: inspect.StateFailing}, {Name: "y", State: inspect.StateUnknown}, {Name: "x", State: inspect.StateProgressing},
	}
	inspect.Sort(ss)
	var got string
	for _, s := range ss {
		got += s.Name
	}
	if got != "zxyab" {
		t.Errorf("order %s, want zxyab", got)
	}
}

func TestStatusSelector(t *testing.T) {
	sel, err := inspect.ParseStatusSelector("Ready=false, podsnotified=Unknown")
	if err != nil {
		t.Fatal(err)
	}
	match := inspect.Summary{Conditions: map[string]metav1.ConditionStatus{"Ready": "False", "PodsNotified": "Unknown"}}
	miss := inspect.Summary{Conditions: map[string]metav1.ConditionStatus{"Ready": "False"}}
	if !sel.Matches(match) || sel.Matches(miss) {
		t.Errorf("selector %v: matches %v, %v", sel, sel.Matches(match), sel.Matches(miss))
	}
	for _, bad := range []string{"ready", "=true", "ready=yes"} {
		if _, err := inspect.ParseStatusSelector(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if all, _ := inspect.ParseStatusSelector(""); !all.Matches(miss) {
		t.Error("an empty selector drops objects")
	}
}

func TestStats(t *testing.T) {
	now := time.Now()
	pushed := now.Add(-5 * time.Minute)
	ss := []inspect.Summary{
		{Kind: inspect.KindDecofile, State: inspect.StateReady, Bytes: 100, Pods: &inspect.Pods{Confirmed: 2, Total: 2}},
		{Kind: inspect.KindDecofile, State: inspect.StateFailing, Bytes: 50, Pods: &inspect.Pods{Confirmed: 1, Total: 3}},
		{Kind: inspect.KindGitTarget, State: inspect.StateReady, Pending: 3, LastChange: &pushed},
		{Kind: inspect.KindTenant, State: inspect.StateReady, Revision: "abc"},
		{Kind: inspect.KindTenant, State: inspect.StateProgressing},
	}
	st := inspect.Stats(ss, now)
	if len(st) != 3 {
		t.Fatalf("%d kinds", len(st))
	}
	df, gt, tn := st[0], st[1], st[2]
	if df.Total != 2 || df.States[inspect.StateFailing] != 1 || df.Bytes != 150 || *df.Pods != (inspect.Pods{Confirmed: 3, Total: 5}) {
		t.Errorf("decofiles %+v", df)
	}
	if gt.Pending != 3 || gt.OldestPushSeconds != 300 {
		t.Errorf("targets %+v", gt)
	}
	if tn.Total != 2 || tn.Provisioned != 1 {
		t.Errorf("tenants %+v", tn)
	}
}
