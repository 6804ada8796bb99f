package nodeenv

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/testenv"
	"github.com/siteops/siteops/pkg/siteruntime"
)

// SiteRepo is a work tree of a repository on the git remote.
type SiteRepo struct {
	URL, Dir string
}

// NewSiteRepo creates repository name on the remote and clones it.
func (e *Env) NewSiteRepo(t testing.TB, name string) *SiteRepo {
	t.Helper()
	url, err := e.Git.CreateRepo(name, "main")
	Must(t, err, "create repository %s", name)
	r := &SiteRepo{URL: url, Dir: e.T.TempDir()}
	testenv.Git(t, r.Dir, "init", "-q", "-b", "main")
	testenv.Git(t, r.Dir, "remote", "add", "origin", url)
	return r
}

// Push commits files and pushes main; it returns the commit.
func (r *SiteRepo) Push(t testing.TB, msg string, files map[string]string) string {
	t.Helper()
	sha := testenv.CommitFiles(t, r.Dir, msg, files)
	testenv.Git(t, r.Dir, "push", "-q", "origin", "HEAD:main")
	return sha
}

// DecofileAt reports nil once Decofile ns/name is Ready with commit sha (and, with notified,
// PodsNotified=True for it).
func (e *Env) DecofileAt(ctx context.Context, ns, name, sha string, notified bool) error {
	var df decov1alpha1.Decofile
	if err := e.C.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &df); err != nil {
		return err
	}
	ready := meta.FindStatusCondition(df.Status.Conditions, decov1alpha1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionTrue || df.Status.GitHubCommit != sha {
		return fmt.Errorf("commit %q, Ready %+v", df.Status.GitHubCommit, ready)
	}
	if notified && !meta.IsStatusConditionTrue(df.Status.Conditions, decov1alpha1.ConditionPodsNotified) {
		return fmt.Errorf("PodsNotified not True: %+v", df.Status.Conditions)
	}
	return nil
}

// WaitDecofile waits until Decofile ns/name is Ready with commit sha (and, with notified,
// PodsNotified=True for it).
func (e *Env) WaitDecofile(t testing.TB, ns, name, sha string, notified bool) time.Duration {
	t.Helper()
	return WaitFor(t, 90*time.Second, "Decofile "+name+" Ready", func(ctx context.Context) error {
		return e.DecofileAt(ctx, ns, name, sha, notified)
	})
}

// ReadyPods waits until the Deployment app has n Ready pods on the node and returns them.
func (e *Env) ReadyPods(t testing.TB, ns, app string, n int) []corev1.Pod {
	t.Helper()
	var ready []corev1.Pod
	WaitFor(t, 90*time.Second, fmt.Sprintf("%d pods of %s/%s Ready", n, ns, app), func(ctx context.Context) error {
		var err error
		ready, err = e.ReadyPodsNow(ctx, ns, app)
		if err != nil {
			return err
		}
		if len(ready) != n {
			return fmt.Errorf("%d of %d pods Ready: %s", len(ready), n, e.podStates(ctx, ns, app))
		}
		return nil
	})
	return ready
}

// podStates says, for each pod of the Deployment app, its phase, node and why its containers
// are not running or not Ready, and the namespace's last Warning Events.
func (e *Env) podStates(ctx context.Context, ns, app string) string {
	var list corev1.PodList
	if err := e.C.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{"app": app}); err != nil {
		return err.Error()
	}
	var out []string
	for _, p := range list.Items {
		state := fmt.Sprintf("%s %s on %q ready=%v", p.Name, p.Status.Phase, p.Spec.NodeName, PodReady(&p))
		for _, c := range p.Status.ContainerStatuses {
			switch {
			case c.State.Waiting != nil:
				state += fmt.Sprintf(", %s waiting %s: %.200s", c.Name, c.State.Waiting.Reason, c.State.Waiting.Message)
			case c.State.Terminated != nil:
				state += fmt.Sprintf(", %s terminated %s (exit %d)", c.Name, c.State.Terminated.Reason, c.State.Terminated.ExitCode)
			}
		}
		out = append(out, state)
	}
	var events corev1.EventList
	if err := e.C.Client.List(ctx, &events, client.InNamespace(ns)); err == nil {
		n := 0
		for i := len(events.Items) - 1; i >= 0 && n < 3; i-- {
			if ev := events.Items[i]; ev.Type == corev1.EventTypeWarning {
				out = append(out, fmt.Sprintf("event %s %s: %.200s", ev.InvolvedObject.Name, ev.Reason, ev.Message))
				n++
			}
		}
	}
	if len(out) == 0 {
		return "no pods"
	}
	return strings.Join(out, "; ")
}

// ReadyPodsNow lists the Ready pods of the Deployment app on the node.
func (e *Env) ReadyPodsNow(ctx context.Context, ns, app string) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := e.C.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{"app": app}); err != nil {
		return nil, err
	}
	var ready []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Spec.NodeName == e.N.Name && p.Status.PodIP != "" && PodReady(&p) {
			ready = append(ready, p)
		}
	}
	return ready, nil
}

var httpClient = &http.Client{Timeout: 5 * time.Second}

// GetOK is the body of GET url, or an error unless it answers 200.
func GetOK(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %.200s", url, resp.Status, b)
	}
	return b, nil
}

// FetchPodInfo is GET /.decofile at the site pod's IP.
func FetchPodInfo(ctx context.Context, ip string) (siteruntime.Info, error) {
	var info siteruntime.Info
	b, err := GetOK(ctx, fmt.Sprintf("http://%s/.decofile", HostPort(ip, SitePort)))
	if err != nil {
		return info, err
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return info, fmt.Errorf("decode /.decofile of %s: %w", ip, err)
	}
	return info, nil
}

// FetchPodContent is the Decofile the site pod at ip serves.
func FetchPodContent(ctx context.Context, ip string) (string, error) {
	b, err := GetOK(ctx, fmt.Sprintf("http://%s/.decofile?content=true", HostPort(ip, SitePort)))
	return string(b), err
}

// PodInfo is FetchPodInfo, failing the test on error.
func PodInfo(t testing.TB, ip string) siteruntime.Info {
	t.Helper()
	info, err := FetchPodInfo(context.Background(), ip)
	Must(t, err, "GET /.decofile of %s", ip)
	return info
}

// PodContent is FetchPodContent, failing the test on error.
func PodContent(t testing.TB, ip string) string {
	t.Helper()
	body, err := FetchPodContent(context.Background(), ip)
	Must(t, err, "content of %s", ip)
	return body
}

// PodLog is the log of pod's first container, through the API server.
func (e *Env) PodLog(ctx context.Context, p *corev1.Pod) (string, error) {
	cs, err := kubernetes.NewForConfig(e.C.Config)
	if err != nil {
		return "", err
	}
	b, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	return string(b), err
}

// GitFileHas checks that file on main of the bare repository contains want.
func GitFileHas(bare, file, want string) error {
	got, err := GitOut(bare, "show", "main:"+file)
	if err != nil {
		return err
	}
	if !strings.Contains(got, want) {
		return fmt.Errorf("%s = %q, want it to contain %q", file, got, want)
	}
	return nil
}

// GitOut runs git with args on the bare repository and returns its trimmed output.
func GitOut(bare string, args ...string) (string, error) {
	out, err := exec.Command("git", append([]string{"--git-dir", bare}, args...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// LargeBlocks makes blocks of about size bytes of JSON that compress like real catalog data
// (repeated keys, varied values).
func LargeBlocks(size int) map[string][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	out := map[string][]byte{}
	total := 0
	for page := 0; total < size; page++ {
		products := make([]map[string]any, 200)
		for i := range products {
			products[i] = map[string]any{
				"sku": fmt.Sprintf("SKU-%06d", page*1000+i), "price": rng.IntN(100000),
				"description": fmt.Sprintf("%x", rng.Uint64()) + fmt.Sprintf("%x", rng.Uint64()),
			}
		}
		b, _ := json.Marshal(map[string]any{"__resolveType": "catalog-page", "products": products})
		out[fmt.Sprintf("page-%02d", page)] = b
		total += len(b)
	}
	return out
}
