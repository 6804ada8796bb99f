package main_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/devenv"
	"github.com/siteops/siteops/internal/scheme"
)

// TestDevUp runs the real binary: it must come up, serve the API through its kubeconfig, and leave
// no process behind after SIGINT.
func TestDevUp(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local control plane")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "siteops")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build siteops: %v\n%s", err, out)
	}
	kubeconfig := filepath.Join(dir, "state", "kubeconfig")
	cmd := exec.Command(bin, "dev", "up", "--kubeconfig", kubeconfig, "--controllers=")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	ready := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			if strings.HasPrefix(s.Text(), devenv.ReadyLine) {
				ready <- s.Text()
			}
		}
	}()
	select {
	case line := <-ready:
		if want := devenv.ReadyLine + " (kubeconfig: " + kubeconfig + ")"; line != want {
			t.Fatalf("ready line = %q, want %q", line, want)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("siteops dev up did not print its ready line within 2 minutes")
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	var nss corev1.NamespaceList
	if err := c.List(context.Background(), &nss); err != nil {
		t.Fatalf("list namespaces through the dev kubeconfig: %v", err)
	}
	if len(nss.Items) == 0 {
		t.Fatal("no namespaces listed")
	}

	children := descendants(cmd.Process.Pid)
	if len(children) < 2 {
		t.Fatalf("expected etcd and kube-apiserver under siteops, found pids %v", children)
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("siteops dev up exited with %v after SIGINT, want 0", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("siteops dev up did not exit within a minute of SIGINT")
	}
	for _, pid := range children {
		if alive(pid) {
			t.Errorf("process %d (%s) still running after dev up exited", pid, comm(pid))
		}
	}
	if _, err := os.Stat(kubeconfig); !os.IsNotExist(err) {
		t.Errorf("kubeconfig left behind: %v", err)
	}
}

// descendants lists every process below pid, from /proc.
func descendants(pid int) []int {
	parents := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp := ppid(p); pp > 0 {
			parents[pp] = append(parents[pp], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, child := range parents[cur] {
			out = append(out, child)
			queue = append(queue, child)
		}
	}
	return out
}

func stat(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

func ppid(pid int) int {
	f := stat(pid)
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

func alive(pid int) bool {
	f := stat(pid)
	return len(f) > 0 && f[0] != "Z"
}

func comm(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return strings.TrimSpace(string(b))
}
