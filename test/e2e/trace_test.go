package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/cli"
	"github.com/siteops/siteops/internal/testenv"
	"github.com/siteops/siteops/test/internal/nodeenv"
)

// notifyPodTimeout is the chart's --notify-pod-timeout here: a frozen pod fails its attempts in
// seconds rather than the default minutes, and a pod that answers never comes near it.
const notifyPodTimeout = "4s"

// traceNamesAPodBehind is step 9: a site pod is frozen (its reload endpoint takes connections
// and never answers) while a commit is published. The other pods confirm it; `siteops trace` of
// the frozen pod exits 1 and names it behind with the reason, and so does the trace of its
// Decofile. Once the pod runs again and the retry reaches it, both traces exit 0.
func (e *env) traceNamesAPodBehind(t *testing.T) {
	pod := e.sitePods[0]
	thaw, err := e.N.FreezePod(pod.UID)
	nodeenv.Must(t, err, "freeze pod %s", pod.Name)
	frozen := true
	defer func() {
		if frozen {
			_ = thaw()
		}
	}()
	key := client.ObjectKey{Namespace: e.siteNS, Name: "shop"}
	var before decov1alpha1.Decofile
	nodeenv.Must(t, e.C.Client.Get(context.Background(), key, &before), "read Decofile shop")
	held := before.Status.NotifiedHash // what every pod confirmed last
	sha := e.site.Push(t, "while a pod is frozen", map[string]string{
		"blocks/site.json": `{"__resolveType": "site", "title": "Shop, edition of the frozen pod"}`,
	})
	took := nodeenv.WaitFor(t, 120*time.Second, fmt.Sprintf("the rollout of %.7s to fail naming %s behind", sha, pod.Name), func(ctx context.Context) error {
		var df decov1alpha1.Decofile
		if err := e.C.Client.Get(ctx, key, &df); err != nil {
			return err
		}
		if df.Status.GitHubCommit != sha || df.Status.Rollout == nil || !meta.IsStatusConditionFalse(df.Status.Conditions, decov1alpha1.ConditionPodsNotified) {
			return fmt.Errorf("commit %.7s, rollout %+v", df.Status.GitHubCommit, df.Status.Rollout)
		}
		// Behind, and still on the content every pod confirmed before: the status says so itself.
		if !slices.ContainsFunc(df.Status.Rollout.Behind, func(b decov1alpha1.PodBehind) bool { return b.Name == pod.Name && b.ConfirmedHash == held }) {
			return fmt.Errorf("behind (want %s on %.12s): %+v", pod.Name, held, df.Status.Rollout.Behind)
		}
		if want := (decov1alpha1.ConfirmedContent{ContentHash: held, Pods: 1}); !slices.Contains(df.Status.Rollout.Confirmed, want) {
			return fmt.Errorf("pods by content %+v, want %+v among them", df.Status.Rollout.Confirmed, want)
		}
		return nil
	})
	t.Logf("the rollout of %.7s failed naming %s behind %s after the push", sha, pod.Name, took.Round(time.Millisecond))

	out, err := e.siteops("trace", "pod/"+pod.Name, "-n", e.siteNS)
	if err == nil {
		t.Fatalf("trace of the frozen pod exited 0:\n%s", out)
	}
	// The exit message names the failing link, not the pod's readiness.
	if want := "pod " + pod.Name + " is behind: "; !strings.Contains(out, want) || !strings.Contains(err.Error(), want) || !strings.Contains(out, "it still serves content "+held[:12]) {
		t.Fatalf("trace of the frozen pod (%v) does not say %q:\n%s", err, want, out)
	}
	t.Logf("`siteops trace pod/%s` exited non-zero: %v\n%s", pod.Name, err, out)
	if out, err := e.siteops("trace", "decofile/shop", "-n", e.siteNS); err == nil || !strings.Contains(out, "behind: "+pod.Name) {
		t.Fatalf("trace of the Decofile (%v) does not name %s behind:\n%s", err, pod.Name, out)
	}

	nodeenv.Must(t, thaw(), "thaw pod %s", pod.Name)
	frozen = false
	thawed := time.Now()
	var last string
	nodeenv.WaitFor(t, 120*time.Second, "`siteops trace pod/"+pod.Name+"` to exit 0 after the thaw", func(context.Context) error {
		var err error
		last, err = e.siteops("trace", "pod/"+pod.Name, "-n", e.siteNS)
		if err != nil {
			return fmt.Errorf("%w\n%s", err, last)
		}
		return nil
	})
	t.Logf("`siteops trace pod/%s` exited 0 %s after the thaw:\n%s", pod.Name, time.Since(thawed).Round(time.Millisecond), last)
	if out, err := e.siteops("trace", "decofile/shop", "-n", e.siteNS); err != nil {
		t.Fatalf("trace of the Decofile after the thaw: %v\n%s", err, out)
	}
	e.checkRolledOut(t, "shop", e.sitePods, "Shop, edition of the frozen pod")
}

// siteops runs the CLI in this process with the test's kubeconfig and returns what it printed.
func (e *env) siteops(args ...string) (string, error) {
	cmd := cli.NewRootCommand()
	out := &testenv.SyncBuffer{}
	cmd.SetOut(out)
	cmd.SetErr(out)
	cmd.SetArgs(append(args, "--kubeconfig", e.KC))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}
