package mirror_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/mirror/sanitize"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// buildManager compiles cmd/siteops-manager once per test binary.
var buildManager = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "siteops-manager-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "siteops-manager")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/siteops/siteops/cmd/siteops-manager")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build siteops-manager: %w: %s", err, out)
	}
	return bin, nil
})

type managerProcess struct {
	cmd *exec.Cmd
	log string
}

func startManagerProcess(t *testing.T, bin, kubeconfig, redisAddr, logPath string) *managerProcess {
	t.Helper()
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--controllers", "mirror", "--leader-elect=false", "--redis-addr", redisAddr, "--redis-key-prefix", "crash", "--commitrequest-webhook=false", "--watchrule-webhook=false",
		"--metrics-bind-address", "0", "--health-probe-bind-address", "127.0.0.1:0"}, localGitFlags...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &managerProcess{cmd: cmd, log: logPath}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			_ = cmd.Wait()
		}
		logFile.Close()
	})
	return p
}

func (p *managerProcess) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
}

// processEnv is what the tests running the manager as a process share: an API server, Redis,
// a namespace with a GitProvider on a git remote, the manager binary and the log file all its
// runs append to, shown when the test fails.
type processEnv struct {
	c                    *testenv.Cluster
	f                    *fixture
	redis                *servers.Process
	bin, dir, kubeconfig string
	log                  string
}

func newProcessEnv(t *testing.T) *processEnv {
	t.Helper()
	c := testenv.APIServer(t)
	bin, err := buildManager()
	if err != nil {
		t.Fatal(err)
	}
	e := &processEnv{c: c, bin: bin, redis: testenv.Redis(t, servers.RedisOptions{}), f: newFixture(t, c), dir: t.TempDir()}
	e.kubeconfig = c.KubeConfigFile(t, e.dir)
	e.log = filepath.Join(e.dir, "manager.log")
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := os.ReadFile(e.log)
			t.Logf("manager log:\n%s", tail(string(out), 4000))
		}
	})
	return e
}

// start runs a manager process of the mirror part.
func (e *processEnv) start(t *testing.T) *managerProcess {
	return startManagerProcess(t, e.bin, e.kubeconfig, e.redis.Addr, e.log)
}

func TestCrashLosesNothing(t *testing.T) {
	e := newProcessEnv(t)
	c, f, logPath := e.c, e.f, e.log
	proc := e.start(t)
	// A long window keeps events pending (received, not pushed) at almost any moment of the kill.
	f.target(t, "t", "live", 2*time.Second, "")
	f.watchRule(t, "cms", "t", cmRule())
	ctx := context.Background()
	const n = 12
	for i := range n {
		f.create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%02d", i), Namespace: f.ns}, Data: map[string]string{"v": "0"}})
	}
	f.waitFile(t, fmt.Sprintf("live/%s/core/configmaps/cm-%02d.yaml", f.ns, n-1), `v: "0"`)

	// Stream changes (updates, deletes and creates) while the manager is killed and restarted.
	var writes atomic.Int64
	stopWriting := make(chan struct{})
	writerDone := make(chan error, 1)
	go func() {
		round := 0
		for {
			select {
			case <-stopWriting:
				writerDone <- nil
				return
			default:
			}
			round++
			for i := range n {
				name := fmt.Sprintf("cm-%02d", i)
				var err error
				switch {
				case i == round%n && round%5 == 0:
					err = c.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}})
				default:
					cm := &corev1.ConfigMap{}
					if gerr := c.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: name}, cm); gerr != nil {
						cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}, Data: map[string]string{}}
						err = c.Client.Create(ctx, cm)
					} else {
						if cm.Data == nil {
							cm.Data = map[string]string{}
						}
						cm.Data["v"] = fmt.Sprint(round)
						err = c.Client.Update(ctx, cm)
					}
				}
				if err != nil && !strings.Contains(err.Error(), "not found") && !strings.Contains(err.Error(), "modified") {
					writerDone <- err
					return
				}
				writes.Add(1)
			}
		}
	}()
	// Wait for a push of streamed changes, then kill mid-window: the events of the last second
	// are received but not pushed.
	streamedFrom := f.commits()
	testenv.Eventually(t, 30*time.Second, func() error {
		if n := f.commits(); n <= streamedFrom {
			return fmt.Errorf("no push of streamed changes yet (%d writes)", writes.Load())
		}
		return nil
	})
	time.Sleep(time.Second)
	// Kill while changes stream in, and stop changing right after: the last changes before the
	// kill are never touched again, so any event the killed manager had not pushed must be
	// recovered from the cursor, or it is lost and the trees differ.
	proc.kill9(t)
	killedAt := writes.Load()
	close(stopWriting)
	if err := <-writerDone; err != nil {
		t.Fatal(err)
	}
	e.start(t)
	t.Logf("%d changes written, manager killed after %d", writes.Load(), killedAt)
	// The restarted manager resumed from the cursor the killed one recorded after its last push.
	testenv.Eventually(t, 10*time.Second, func() error {
		out, _ := os.ReadFile(logPath)
		if !strings.Contains(string(out), "resuming watch from cursor") {
			return fmt.Errorf("the restarted manager did not resume from a cursor")
		}
		return nil
	})

	// The git tree converges to exactly the cluster's final state.
	testenv.Eventually(t, 60*time.Second, func() error {
		want, err := clusterState(ctx, c, f.ns, "live")
		if err != nil {
			return err
		}
		var problems []string
		got := f.files(t, "live/"+f.ns)
		for _, p := range got {
			if _, ok := want[p]; !ok {
				problems = append(problems, "extra file "+p)
			}
		}
		for p, content := range want {
			if have := f.file(p); have != strings.TrimSpace(content) {
				problems = append(problems, fmt.Sprintf("%s differs: have %q want %q", p, have, content))
			}
		}
		if len(problems) > 0 {
			sort.Strings(problems)
			return fmt.Errorf("%d differences: %s", len(problems), strings.Join(problems, "; "))
		}
		return nil
	})
}

// clusterState returns the expected file content of every ConfigMap of ns.
func clusterState(ctx context.Context, c *testenv.Cluster, ns, base string) (map[string]string, error) {
	var list unstructured.UnstructuredList
	list.SetAPIVersion("v1")
	list.SetKind("ConfigMapList")
	if err := c.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for i := range list.Items {
		obj := &list.Items[i]
		obj.SetAPIVersion("v1")
		obj.SetKind("ConfigMap")
		b, err := sanitize.Object(obj)
		if err != nil {
			return nil, err
		}
		out[fmt.Sprintf("%s/%s/core/configmaps/%s.yaml", base, ns, obj.GetName())] = string(b)
	}
	return out, nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
