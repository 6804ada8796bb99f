package pushlive

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode/sample"
	"github.com/siteops/siteops/internal/decofile/push"
	"github.com/siteops/siteops/internal/egress"
	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
	"github.com/siteops/siteops/internal/testenv/simpods"
)

// blocksPath is the repository folder of the site's block files.
const blocksPath = ".deco/blocks"

// site is one Decofile followed by the manager, its repository and its pods.
type site struct {
	c    *testenv.Cluster
	cl   client.Client
	ns   string
	work string // clone of the repository the pushes are made from
	df   *decov1.Decofile
	// events holds when each push event reached the manager's receiver.
	events *eventClock
}

// eventClock forwards push events to the manager's receiver and notes when each arrived.
type eventClock struct {
	mu      sync.Mutex
	arrived []time.Time
}

func (c *eventClock) forward(target *url.URL) http.Handler {
	proxy := httputil.NewSingleHostReverseProxy(target)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.arrived = append(c.arrived, time.Now())
		c.mu.Unlock()
		proxy.ServeHTTP(w, r)
	})
}

// last is when the latest push event arrived.
func (c *eventClock) last() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.arrived) == 0 {
		return time.Time{}
	}
	return c.arrived[len(c.arrived)-1]
}

// startSite starts the manager's Decofile part at its default settings, with the push receiver
// on, a git remote announcing every push to it, a repository holding files, a Decofile
// following its main branch (polling only every hour), and pods pods labelled for it. It
// returns once the first commit is stored and every pod confirmed it.
func startSite(t testing.TB, files map[string][]byte, pods []simpods.Pod) *site {
	t.Helper()
	c := testenv.APIServer(t)
	// As ctrl.GetConfig gives the siteops-manager command: no client-side rate limit.
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS = -1
	cl, err := client.New(cfg, client.Options{Scheme: c.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	s := &site{c: c, cl: cl, ns: c.Namespace(t, "pushlive", nil)}

	secret := []byte("push-event-secret")
	secretFile := filepath.Join(t.TempDir(), "push-secret")
	if err := os.WriteFile(secretFile, secret, 0o600); err != nil {
		t.Fatal(err)
	}
	receiver := testenv.FreeLoopbackAddr(t)
	// The events pass through a clock on loopback: the time of a push runs from when its event
	// arrived, a moment before the receiver has it.
	s.events = &eventClock{}
	clock := httptest.NewServer(s.events.forward(&url.URL{Scheme: "http", Host: receiver}))
	t.Cleanup(clock.Close)
	git := testenv.GitRemote(t, servers.GitRemoteOptions{})
	git.AnnouncePushes(clock.URL+push.Path, secret)
	url, err := git.CreateRepo("site", "main")
	if err != nil {
		t.Fatal(err)
	}
	s.work = t.TempDir()
	testenv.Git(t, s.work, "clone", "-q", url, ".")
	testenv.Git(t, s.work, "checkout", "-q", "-b", "main")
	for name, content := range files {
		writeFile(t, filepath.Join(s.work, blocksPath, name), content)
	}
	first := s.commitAndPush(t, "site")

	o := manager.DefaultOptions()
	o.Controllers = []string{manager.PartDecofile}
	o.MetricsAddr, o.ProbeAddr, o.LeaderElect = "0", "0", false
	o.SecondInProcess = true // the benchmark starts a manager per case
	o.Decofile.DisableInjection = true
	o.Decofile.Push.BindAddress, o.Decofile.Push.SecretFile = receiver, secretFile
	// The git remote serves plain HTTP on loopback: exactly its host and port are allowed, as a
	// platform allows its own git host.
	d := &o.Decofile.Delivery
	d.SourceAllowedSchemes = append(slices.Clone(egress.DefaultSchemes), "http")
	d.SourceAllowedHosts = append(d.SourceAllowedHosts, strings.TrimPrefix(git.BaseURL, "http://"))
	mgr, err := manager.New(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	testenv.StartManager(t, mgr)

	createPods(t, cl, s.ns, pods)
	s.df = &decov1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: s.ns},
		Spec: decov1.DecofileSpec{Source: decov1.SourceGit, Interval: &metav1.Duration{Duration: time.Hour},
			Git: &decov1.GitSource{URL: url, Ref: "main", Path: blocksPath}},
	}
	if err := cl.Create(context.Background(), s.df); err != nil {
		t.Fatal(err)
	}
	s.waitConfirmed(t, first, time.Time{}, 5*time.Minute)
	return s
}

// edit changes one block file and pushes the commit; the git remote has announced it when this
// returns. It returns the new commit.
func (s *site) edit(t testing.TB, version int) string {
	t.Helper()
	writeFile(t, filepath.Join(s.work, blocksPath, "version.json"), fmt.Appendf(nil, `{"__resolveType":"site/loaders/version.ts","version":%d}`, version))
	return s.commitAndPush(t, fmt.Sprintf("version %d", version))
}

func (s *site) commitAndPush(t testing.TB, msg string) string {
	t.Helper()
	testenv.Git(t, s.work, "add", "-A")
	testenv.Git(t, s.work, "commit", "-q", "-m", msg)
	testenv.Git(t, s.work, "push", "-q", "origin", "main")
	return testenv.Git(t, s.work, "rev-parse", "HEAD")
}

// waitConfirmed waits until every pod confirmed commit (PodsNotified=True for it), polling every
// 10 ms, and returns how long it took until the commit was stored (status.githubCommit) and until
// every pod confirmed it, counted from start (zero: from now).
func (s *site) waitConfirmed(t testing.TB, commit string, start time.Time, timeout time.Duration) (stored, confirmed time.Duration) {
	t.Helper()
	if start.IsZero() {
		start = time.Now()
	}
	want := "Successfully notified all pods for commit:" + commit
	var last string
	for time.Since(start) < timeout {
		var d decov1.Decofile
		if err := s.cl.Get(context.Background(), client.ObjectKeyFromObject(s.df), &d); err != nil {
			t.Fatal(err)
		}
		if stored == 0 && d.Status.GitHubCommit == commit {
			stored = time.Since(start)
		}
		if c := meta.FindStatusCondition(d.Status.Conditions, decov1.ConditionPodsNotified); c != nil {
			if c.Status == metav1.ConditionTrue && c.Message == want {
				return stored, time.Since(start)
			}
			last = fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("commit %s not confirmed by every pod after %s; PodsNotified: %s", commit, timeout, last)
	return 0, 0
}

// createPods creates a Running Pod object labelled for the Decofile "site" per simulated pod,
// with the pod's address as its IP and reload port, 16 at a time.
func createPods(t testing.TB, cl client.Client, ns string, pods []simpods.Pod) {
	t.Helper()
	ctx := context.Background()
	work := make(chan int)
	errs := make(chan error, len(pods))
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range work {
				p := pods[i]
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("site-%04d", i), Namespace: ns, Labels: map[string]string{decov1.LabelDecofile: "site"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "site:latest",
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: p.Port}}}}},
				}
				if err := cl.Create(ctx, pod); err != nil {
					errs <- err
					continue
				}
				pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: p.IP, PodIPs: []corev1.PodIP{{IP: p.IP}},
					Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
				if err := cl.Status().Update(ctx, pod); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range pods {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatalf("create the pods: %v", err)
	}
}

func writeFile(t testing.TB, path string, content []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A push reaches every pod without waiting for the Decofile's interval (an hour): the git
// remote's push event makes the manager fetch, store and notify at once.
func TestPushReachesEveryPod(t *testing.T) {
	pods := simpods.Start(t, 20, "br, gzip")
	files := sample.Generate(sample.Options{Seed: 1, Blocks: 20, TargetBytes: 40 << 10})
	s := startSite(t, files, pods)
	for v := range 3 {
		before := s.events.last()
		commit := s.edit(t, v)
		received := s.events.last()
		if !received.After(before) {
			t.Fatalf("push %d: no push event reached the manager", v)
		}
		_, took := s.waitConfirmed(t, commit, received, time.Minute)
		t.Logf("push %d: all %d pods confirmed %s after the push event", v, len(pods), took.Round(time.Millisecond))
	}
}
