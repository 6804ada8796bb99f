package cli

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/siteops/siteops/internal/testenv"
)

// recordEvent writes an Event as a controller named reporter would.
func recordEvent(t *testing.T, c *testenv.Cluster, ns, reporter, typ, reason, kind, name, note string, at time.Time) {
	t.Helper()
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Namespace: ns, GenerateName: "ev-"},
		EventTime:           metav1.NewMicroTime(at),
		ReportingController: reporter, ReportingInstance: reporter + "-0", Action: "Reconcile",
		Type: typ, Reason: reason, Note: note,
		Regarding: corev1.ObjectReference{Kind: kind, Namespace: ns, Name: name},
	}
	must(t, c.Client.Create(context.Background(), ev))
}

func TestEvents(t *testing.T) {
	c := testenv.APIServer(t)
	ns := c.Namespace(t, "events", nil)
	kc := kubeconfigFor(t, c.Config, ns)
	now := time.Now()
	recordEvent(t, c, ns, "siteops-rollout", "Warning", "RolledBack", "Decofile", "shop", "step 1 failed its check; rolled back to commit 1234567", now.Add(-time.Minute))
	recordEvent(t, c, ns, "siteops-decofile", "Normal", "Delivered", "Decofile", "shop", "stored commit 89abcde", now.Add(-2*time.Minute))
	recordEvent(t, c, ns, "siteops-tenant", "Normal", "ValkeyACLProvisioned", "Namespace", ns, "user provisioned on 3 nodes", now.Add(-30*time.Second))
	recordEvent(t, c, ns, "kubelet", "Warning", "BackOff", "Pod", "shop-1", "not siteops'", now)

	out, _, err := runCLI(context.Background(), "events", "--kubeconfig", kc)
	must(t, err)
	golden(t, "events.golden", out, ns)
	if strings.Contains(out, "BackOff") {
		t.Errorf("another controller's Event is shown:\n%s", out)
	}
	// Read a page of one Event at a time, the same Events in the same order.
	defer func(n int64) { eventsPageSize = n }(eventsPageSize)
	eventsPageSize = 1
	paged, _, err := runCLI(context.Background(), "events", "--kubeconfig", kc)
	must(t, err)
	golden(t, "events.golden", paged, ns)
	out, _, err = runCLI(context.Background(), "events", "--types", "warning", "--for", "Decofile/shop", "--kubeconfig", kc)
	must(t, err)
	if !strings.Contains(out, "RolledBack") || strings.Contains(out, "Delivered") || strings.Contains(out, "ValkeyACL") {
		t.Errorf("--types warning --for Decofile/shop:\n%s", out)
	}
	if _, _, err := runCLI(context.Background(), "events", "--types", "Error", "--kubeconfig", kc); err == nil {
		t.Error("an unknown Event type is accepted")
	}

	// -w prints an Event recorded while it watches.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	live, done := startCLI(ctx, "events", "-w", "--kubeconfig", kc)
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(live.String(), "RolledBack") {
			return errors.New("no list yet: " + live.String())
		}
		return nil
	})
	recordEvent(t, c, ns, "siteops-mirror", "Warning", "PushFailed", "GitTarget", "prod", "git host refused the push", time.Now())
	testenv.Eventually(t, 10*time.Second, func() error {
		if !regexp.MustCompile(`Warning\s+PushFailed\s+gittarget/prod\s+git host refused the push`).MatchString(live.String()) {
			return errors.New("no line for the new Event: " + live.String())
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("events -w ended with %v", err)
	}
	if n := strings.Count(live.String(), "RolledBack"); n != 1 {
		t.Errorf("an Event printed %d times:\n%s", n, live.String())
	}
}
