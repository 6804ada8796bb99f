package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/testenv"
)

type waitFixture struct {
	t          *testing.T
	c          *testenv.Cluster
	ns         string
	kubeconfig string
	df         *decov1alpha1.Decofile
}

func newWaitFixture(t *testing.T) *waitFixture {
	c := testenv.APIServer(t)
	ns := c.Namespace(t, "wait", nil)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, c.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	df := &decov1alpha1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns},
		Spec: decov1alpha1.DecofileSpec{Source: decov1alpha1.SourceGitHub,
			GitHub: &decov1alpha1.GitHubSource{Org: "acme", Repo: "site", Commit: "main"}},
	}
	if err := c.Client.Create(context.Background(), df); err != nil {
		t.Fatal(err)
	}
	return &waitFixture{t: t, c: c, ns: ns, kubeconfig: kc, df: df}
}

// setRollout records a rollout state the way the rollout controller does.
func (f *waitFixture) setRollout(commit string, status metav1.ConditionStatus, msg string, notified, total int32) {
	f.t.Helper()
	var d decov1alpha1.Decofile
	if err := f.c.Client.Get(context.Background(), client.ObjectKeyFromObject(f.df), &d); err != nil {
		f.t.Fatal(err)
	}
	d.Status.SourceType, d.Status.GitHubCommit, d.Status.ContentHash = decov1alpha1.SourceGitHub, commit, "hash-"+commit
	reason := map[metav1.ConditionStatus]string{metav1.ConditionUnknown: decov1alpha1.ReasonNotificationInProgress,
		metav1.ConditionTrue: decov1alpha1.ReasonNotificationSucceeded, metav1.ConditionFalse: decov1alpha1.ReasonNotificationFailed}[status]
	meta.SetStatusCondition(&d.Status.Conditions, metav1.Condition{Type: decov1alpha1.ConditionPodsNotified, Status: status, Reason: reason, Message: msg})
	d.Status.Rollout = &decov1alpha1.RolloutStatus{ID: "commit:" + commit, Total: total, Notified: notified, StartedAt: &metav1.Time{Time: time.Now()}}
	if err := f.c.Client.Status().Update(context.Background(), &d); err != nil {
		f.t.Fatal(err)
	}
}

// run executes `siteops decofile wait` and returns its error and output.
func (f *waitFixture) run(args ...string) (string, error) {
	out := &testenv.SyncBuffer{}
	_, err := f.start(out, args...)()
	return out.String(), err
}

func (f *waitFixture) start(out *testenv.SyncBuffer, args ...string) func() (string, error) {
	cmd := NewRootCommand()
	cmd.SetOut(out)
	cmd.SetErr(out)
	cmd.SetArgs(append([]string{"decofile", "wait", "shop", "-n", f.ns, "--kubeconfig", f.kubeconfig}, args...))
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(context.Background()) }()
	return func() (string, error) {
		select {
		case err := <-done:
			return out.String(), err
		case <-time.After(30 * time.Second):
			f.t.Fatal("decofile wait did not return")
			return "", nil
		}
	}
}

func exitCode(err error) int {
	var e interface{ ExitCode() int }
	if errors.As(err, &e) {
		return e.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func TestDecofileWait(t *testing.T) {
	f := newWaitFixture(t)
	const c1, c2 = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

	// Started before the rollout: sees progress, then success.
	out := &testenv.SyncBuffer{}
	wait := f.start(out, "--for", "commit:"+c1, "--timeout", "20s")
	f.setRollout(c1, metav1.ConditionUnknown, "Notifying pods for commit:"+c1, 1, 3)
	testenv.Eventually(t, 10*time.Second, func() error {
		if !strings.Contains(out.String(), "commit:"+c1+": notified 1/3 pods") {
			return errors.New("no progress line yet: " + out.String())
		}
		return nil
	})
	f.setRollout(c1, metav1.ConditionTrue, "Successfully notified all pods for commit:"+c1, 3, 3)
	text, err := wait()
	if exitCode(err) != 0 || !strings.Contains(text, "Successfully notified all pods for commit:"+c1) {
		t.Fatalf("before: exit %d (%v), output %q", exitCode(err), err, text)
	}

	// Started after the rollout: the same answer, at once.
	text2, err := f.run("--for", "commit:"+c1, "--timeout", "5s")
	if exitCode(err) != 0 || lastLine(text) != lastLine(text2) {
		t.Fatalf("after: exit %d (%v), output %q", exitCode(err), err, text2)
	}
	// "current" resolves to the stored version.
	if _, err := f.run("--for", "current", "--timeout", "5s"); exitCode(err) != 0 {
		t.Fatalf("current: %v", err)
	}

	// A failed rollout exits 1 with the reason.
	f.setRollout(c2, metav1.ConditionFalse, "Failed to notify pods for commit:"+c2+": 1 of 3 pods failed: shop-b: HTTP 503", 2, 3)
	_, err = f.run("--for", "commit:"+c2, "--timeout", "5s")
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "shop-b: HTTP 503") {
		t.Fatalf("failed: exit %d (%v)", exitCode(err), err)
	}

	// A version that never rolls out times out with exit 2.
	start := time.Now()
	_, err = f.run("--for", "commit:cccccccc", "--timeout", "1s")
	if exitCode(err) != 2 || !strings.Contains(err.Error(), "timed out after 1s") || time.Since(start) > 10*time.Second {
		t.Fatalf("timeout: exit %d (%v) after %s", exitCode(err), err, time.Since(start))
	}

	// Bad input is refused before anything is read.
	if _, err := f.run("--for", "branch:main"); err == nil || exitCode(err) == 0 || !strings.Contains(err.Error(), "want current, commit:") {
		t.Fatalf("bad --for: %v", err)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestDecofileWaitShortCommit: --for commit:<short sha>, as the Commit printer column shows it,
// waits for the commit it abbreviates; a prefix that matches two commits the Decofile knows of
// is refused.
func TestDecofileWaitShortCommit(t *testing.T) {
	f := newWaitFixture(t)
	const full = "0123abcd4567ef890123abcd4567ef890123abcd"
	short := full[:7]

	out := &testenv.SyncBuffer{}
	wait := f.start(out, "--for", "commit:"+short, "--timeout", "20s")
	f.setRollout(full, metav1.ConditionUnknown, "Notifying pods for commit:"+full, 1, 2)
	f.setRollout(full, metav1.ConditionTrue, "Successfully notified all pods for commit:"+full, 2, 2)
	text, err := wait()
	if exitCode(err) != 0 || !strings.Contains(text, "Successfully notified all pods for commit:"+full) {
		t.Fatalf("started before: exit %d (%v), output %q", exitCode(err), err, text)
	}
	if text, err := f.run("--for", "commit:"+short, "--timeout", "5s"); exitCode(err) != 0 || !strings.Contains(text, "commit:"+full) {
		t.Fatalf("started after: exit %d (%v), output %q", exitCode(err), err, text)
	}

	// The stored commit and the one of the rollout in the summary share the prefix.
	const twin = "0123abcdffffffffffffffffffffffffffffffff"
	var d decov1alpha1.Decofile
	if err := f.c.Client.Get(context.Background(), client.ObjectKeyFromObject(f.df), &d); err != nil {
		t.Fatal(err)
	}
	d.Status.GitHubCommit = twin
	if err := f.c.Client.Status().Update(context.Background(), &d); err != nil {
		t.Fatal(err)
	}
	if _, err := f.run("--for", "commit:"+short, "--timeout", "5s"); exitCode(err) != 1 || !strings.Contains(err.Error(), "ambiguous") {
		t.Fatalf("ambiguous prefix: exit %d (%v)", exitCode(err), err)
	}
	if _, err := f.run("--for", "commit:0123ab", "--timeout", "5s"); err == nil || !strings.Contains(err.Error(), "at least 7") {
		t.Fatalf("six characters: %v", err)
	}
}
