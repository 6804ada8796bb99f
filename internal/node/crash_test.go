package node_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/node"
	"github.com/siteops/siteops/internal/testenv"
)

// childEnv makes the test binary run TestNodeChild as a node's owner process.
const childEnv = "SITEOPS_NODE_CHILD_KUBECONFIG"

// TestNodeChild is the process killed by TestNodeDiesWithItsOwner; it does nothing otherwise.
func TestNodeChild(t *testing.T) {
	kubeconfig := os.Getenv(childEnv)
	if kubeconfig == "" {
		t.Skip("runs only as the child of TestNodeDiesWithItsOwner")
	}
	b, err := os.ReadFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(filepath.Dir(kubeconfig), "node")
	n, err := node.Start(context.Background(), node.Options{KubeConfig: b, Dir: dir,
		Images: []string{testenv.ImageArchive(t, "siteops-site")}})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("READY %s %s\n", n.Name, n.Dir)
	time.Sleep(5 * time.Minute)
}

// TestNodeDiesWithItsOwner kills the process that started a node (with a running pod) and
// checks that every process of the node dies with it, and that Sweep removes the network
// namespace, veth pair and cgroups it left.
func TestNodeDiesWithItsOwner(t *testing.T) {
	c := testenv.APIServer(t)
	testenv.RequireNode(t)
	site := testenv.ImageArchive(t, "siteops-site")
	c.Controllers(t)
	dir := t.TempDir()
	kubeconfig := c.KubeConfigFile(t, dir)
	child := exec.Command(os.Args[0], "-test.run=^TestNodeChild$", "-test.count=1")
	child.Env = append(os.Environ(), childEnv+"="+kubeconfig)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	ready := make(chan []string, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if f := strings.Fields(s.Text()); len(f) == 3 && f[0] == "READY" {
				ready <- f[1:]
			}
		}
		close(ready)
	}()
	var name, nodeDir string
	select {
	case f, ok := <-ready:
		if !ok {
			t.Fatal("the child exited before its node was Ready")
		}
		name, nodeDir = f[0], f[1]
		// A dead node's Node stays Ready until a controller notices: never leave it to others.
		t.Cleanup(func() {
			_ = c.Client.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}})
		})
	case <-time.After(2 * time.Minute):
		t.Fatal("the child's node not Ready after 2 minutes")
	}

	ctx := context.Background()
	ns := c.PodNamespace(t, "crash")
	pod := sitePod(ns, name, testenv.ImageRef(t, site))
	pod.Spec.Containers[0].Env = nil
	pod.Spec.Containers[0].VolumeMounts, pod.Spec.Volumes = nil, nil
	if err := c.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, func() error {
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
			return err
		}
		if pod.Status.Phase != corev1.PodRunning {
			return fmt.Errorf("pod %s", pod.Status.Phase)
		}
		return nil
	})
	if len(nodeProcesses(name, nodeDir)) == 0 {
		t.Fatal("found no process of the running node: the check below would prove nothing")
	}

	_ = child.Process.Kill()
	_ = child.Wait()
	testenv.Eventually(t, 10*time.Second, func() error {
		if p := nodeProcesses(name, nodeDir); len(p) > 0 {
			return fmt.Errorf("node processes still running after its owner was killed: %v", p)
		}
		return nil
	})
	if err := node.Sweep(ctx); err != nil {
		t.Fatalf("sweep: %v", err)
	}
	for _, p := range []string{"/run/netns/" + name, "/sys/fs/cgroup/memory/" + name, "/sys/fs/cgroup/unified/" + name} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s is still there after Sweep", p)
		}
	}
}

// nodeProcesses lists processes whose command line names the node's folder (kubelet,
// containerd, shims) or that sit in the node's cgroups (containers).
func nodeProcesses(name, dir string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(string(cmdline), "\x00", " ")
		if strings.Contains(cmd, dir) && !strings.Contains(cmd, "-test.run") {
			out = append(out, e.Name()+": "+cmd)
		}
	}
	for _, h := range []string{"memory", "pids", "unified"} {
		_ = filepath.WalkDir(filepath.Join("/sys/fs/cgroup", h, name), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Name() == "cgroup.procs" {
				if b, _ := os.ReadFile(p); len(strings.TrimSpace(string(b))) > 0 {
					out = append(out, p+": "+strings.Join(strings.Fields(string(b)), ","))
				}
			}
			return nil
		})
	}
	return out
}
