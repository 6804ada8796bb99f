package provision

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/siteops/siteops/internal/tenant/acl"
)

func TestCutRetiring(t *testing.T) {
	const grace = time.Hour
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	old := []string{"h1", "h2"}
	r := &Reconciler{MaxGrace: grace}
	for _, c := range []struct {
		name      string
		st        State
		revoke    string
		wantCut   string
		wantLeft  int
		wantSince time.Time
	}{
		{name: "starts the grace", st: State{Retiring: old}, wantLeft: 2, wantSince: now},
		{name: "within the grace", st: State{Retiring: old, RetiringSince: now.Add(-grace + time.Second)}, wantLeft: 2, wantSince: now.Add(-grace + time.Second)},
		{name: "grace over", st: State{Retiring: old, RetiringSince: now.Add(-grace)}, wantCut: CutMaxGrace},
		{name: "since in the future starts again", st: State{Retiring: old, RetiringSince: now.Add(grace)}, wantLeft: 2, wantSince: now},
		{name: "nothing retiring", st: State{RetiringSince: now.Add(-2 * grace)}},
		{name: "revoked", st: State{Retiring: old, RetiringSince: now}, revoke: "v1", wantCut: CutRevokeNow},
		{name: "revoked before", st: State{Retiring: old, RetiringSince: now, Revoked: "v1"}, revoke: "v1", wantLeft: 2, wantSince: now},
		{name: "revoke with nothing retiring", st: State{}, revoke: "v2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sites-x", Annotations: map[string]string{}}}
			if c.revoke != "" {
				ns.Annotations[AnnotationRevoke] = c.revoke
			}
			st := c.st
			if got := r.cutRetiring(ns, &st, now); got != c.wantCut {
				t.Errorf("cut %q, want %q", got, c.wantCut)
			}
			if len(st.Retiring) != c.wantLeft || !st.RetiringSince.Equal(c.wantSince) {
				t.Errorf("left %v since %v, want %d since %v", st.Retiring, st.RetiringSince, c.wantLeft, c.wantSince)
			}
			if c.revoke != "" && st.Revoked != c.revoke {
				t.Errorf("revoke %q not recorded as carried out: %q", c.revoke, st.Revoked)
			}
		})
	}
}

func TestRetiringSinceRoundTrips(t *testing.T) {
	since := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
	State{Digest: acl.HashPassword("p"), Retiring: []string{acl.HashPassword("o")}, RetiringSince: since, Revoked: "v"}.Apply(ns.Annotations)
	st, err := StateFrom(ns)
	if err != nil || !st.RetiringSince.Equal(since) || st.Revoked != "v" {
		t.Fatalf("read back %+v, %v", st, err)
	}
	State{Digest: acl.HashPassword("p"), RetiringSince: since}.Apply(ns.Annotations)
	if _, ok := ns.Annotations[AnnotationRetiringSince]; ok {
		t.Fatal("a start time is kept without retiring passwords")
	}
	ns.Annotations[AnnotationRetiringSince] = "yesterday"
	if st, err := StateFrom(ns); err == nil || !st.RetiringSince.IsZero() {
		t.Fatalf("an invalid start time was accepted: %+v %v", st, err)
	}
}
