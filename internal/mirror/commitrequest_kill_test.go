package mirror_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/mirror/gitwriter"
	"github.com/siteops/siteops/internal/testenv"
)

// TestCommitRequestKilledBetweenPushAndStatus kills the manager process (SIGKILL) once the
// remote has moved its branch to a CommitRequest's commit and before the manager heard so: a
// reference-transaction hook holds the push's answer. The restarted manager finds the commit
// by the request's trailer and reports it; the message is on the branch once.
func TestCommitRequestKilledBetweenPushAndStatus(t *testing.T) {
	e := newProcessEnv(t)
	c, f, dir, logPath := e.c, e.f, e.dir, e.log
	// Once armed, the hook lets the branch move and then holds the push's answer, so the
	// manager is killed with its commit on the remote and no word of it.
	armed, received := filepath.Join(dir, "armed"), filepath.Join(dir, "received")
	hook := fmt.Sprintf("#!/bin/sh\nif [ \"$1\" = committed ] && [ -e %q ]; then rm -f %q; touch %q; sleep 20; fi\n", armed, armed, received)
	if err := os.WriteFile(filepath.Join(f.bare, "hooks", "reference-transaction"), []byte(hook), 0o755); err != nil {
		t.Fatal(err)
	}

	proc := e.start(t)
	// A long window: the ConfigMap stays pending until the request closes it.
	f.target(t, "t", "live", 10*time.Minute, "")
	f.watchRule(t, "cms", "t", cmRule())
	f.create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: f.ns}, Data: map[string]string{"color": "blue"}})
	ctx := context.Background()
	// The watch hands the listed ConfigMap to the writer before it says so.
	testenv.Eventually(t, 30*time.Second, func() error {
		out, _ := os.ReadFile(logPath)
		if !strings.Contains(string(out), `"msg":"replayed current state","gitTarget":"`+f.ns+`/t"`) {
			return fmt.Errorf("the watch has not listed the ConfigMaps yet")
		}
		return nil
	})
	if err := os.WriteFile(armed, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	const message = "Release 7: the killed leader's commit"
	cr := &mirrorv1alpha1.CommitRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "release-7"},
		Spec:       mirrorv1alpha1.CommitRequestSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "t"}, Message: message},
	}
	f.create(t, cr)
	testenv.Eventually(t, 60*time.Second, func() error {
		if _, err := os.Stat(received); err != nil {
			return fmt.Errorf("the remote has not taken the request's commit yet")
		}
		return nil
	})
	proc.kill9(t)

	pushed := strings.TrimSpace(f.git(t, "rev-parse", "main"))
	trailers := f.git(t, "log", "-1", "--format=%(trailers:key="+gitwriter.TrailerCommitRequest+",valueonly)", "main")
	if strings.TrimSpace(trailers) != string(cr.UID) {
		t.Fatalf("the branch's tip %s names request %q in its trailer, want %s", pushed, trailers, cr.UID)
	}
	if err := c.Client.Get(ctx, client.ObjectKeyFromObject(cr), cr); err != nil {
		t.Fatal(err)
	}
	if cond := meta.FindStatusCondition(cr.Status.Conditions, mirrorv1alpha1.ConditionCommitted); cond == nil || cond.Reason != mirrorv1alpha1.ReasonCommitting {
		t.Fatalf("after the kill, Committed = %+v; want the Committing mark written before the push", cond)
	}

	e.start(t)
	testenv.Eventually(t, 60*time.Second, func() error {
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(cr), cr); err != nil {
			return err
		}
		cond := meta.FindStatusCondition(cr.Status.Conditions, mirrorv1alpha1.ConditionCommitted)
		if cond == nil || cond.Status != metav1.ConditionTrue {
			return fmt.Errorf("Committed = %+v", cond)
		}
		return nil
	})
	cond := meta.FindStatusCondition(cr.Status.Conditions, mirrorv1alpha1.ConditionCommitted)
	if cond.Reason != mirrorv1alpha1.ReasonPushed || cr.Status.Commit != pushed {
		t.Fatalf("the restarted manager reports %s, commit %q; want Pushed with the killed leader's commit %s", cond.Reason, cr.Status.Commit, pushed)
	}
	if n := strings.Count(f.git(t, "log", "--format=%B", "main"), message); n != 1 {
		t.Fatalf("the request's message is on the branch %d times, want once", n)
	}
	t.Logf("the killed leader pushed %.12s; the restarted manager reported it: %s", pushed, cond.Message)
}
