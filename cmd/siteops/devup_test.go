package main_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/devenv"
	"github.com/siteops/siteops/internal/scheme"
	"github.com/siteops/siteops/internal/testenv"
)

// tableComponents are the rows `dev up` must print, each with an address.
var tableComponents = []string{"API server", "manager", "Valkey master", "Valkey replica", "Valkey Sentinels",
	"Redis (mirror)", "S3", "git remote", "audit receiver", "kubeconfig", "log folder"}

// TestDevUp runs the real binary: quiet start-up (progress lines, one table naming every
// component with its address, the ready line; logs in files), the API served through its
// kubeconfig, and no process left behind after SIGINT.
func TestDevUp(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local control plane")
	}
	d := startDevUp(t)
	table := d.table(t)
	for _, name := range tableComponents {
		if table[name] == "" {
			t.Errorf("the table has no address for %q:\n%s", name, d.stdout())
		}
	}
	if table["kubeconfig"] != d.kubeconfig {
		t.Errorf("the table names kubeconfig %q, want %q", table["kubeconfig"], d.kubeconfig)
	}
	for _, name := range []string{"Valkey master", "S3", "git remote"} {
		if !strings.Contains(table[name], "127.0.0.1:") {
			t.Errorf("%s at %q, want a loopback address without --node", name, table[name])
		}
	}
	// The web UI serves the admin at the address the table gives, token and all.
	if ui := table["web UI"]; !strings.HasPrefix(ui, "http://127.0.0.1:") || !strings.Contains(ui, "?token=") {
		t.Errorf("web UI at %q, want a loopback address with its sign-in token", ui)
	} else {
		jar, _ := cookiejar.New(nil)
		res, err := (&http.Client{Jar: jar}).Get(ui)
		if err != nil {
			t.Fatalf("open the web UI: %v", err)
		}
		page, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !bytes.Contains(page, []byte("<h1>Overview</h1>")) {
			t.Errorf("the web UI answered HTTP %d:\n%.500s", res.StatusCode, page)
		}
	}
	// Quiet: nothing but progress lines, the table and the ready line; the manager's JSON log
	// is in its file.
	for _, line := range strings.Split(d.stdout()+d.stderr(), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "{") {
			t.Fatalf("a log line reached the terminal: %s", line)
		}
	}
	managerLog, err := os.ReadFile(filepath.Join(table["log folder"], devenv.ManagerLogName))
	if err != nil || !bytes.Contains(managerLog, []byte(`"manager running"`)) {
		t.Errorf("the manager's log file does not hold its start-up (%v):\n%.500s", err, managerLog)
	}

	c := d.client(t)
	var nss corev1.NamespaceList
	if err := c.List(context.Background(), &nss); err != nil {
		t.Fatalf("list namespaces through the dev kubeconfig: %v", err)
	}
	if len(nss.Items) == 0 {
		t.Fatal("no namespaces listed")
	}
	children := descendants(d.cmd.Process.Pid)
	if len(children) < 2 {
		t.Fatalf("expected etcd and kube-apiserver under siteops, found pids %v", children)
	}
	d.interrupt(t)
	for _, pid := range children {
		if alive(pid) {
			t.Errorf("process %d (%s) still running after dev up exited", pid, comm(pid))
		}
	}
	if _, err := os.Stat(d.kubeconfig); !os.IsNotExist(err) {
		t.Errorf("kubeconfig left behind: %v", err)
	}
}

// TestDevUpVerboseStreamsLogs: with -v the components' logs reach stderr as well, each line
// named after its component.
func TestDevUpVerboseStreamsLogs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local control plane")
	}
	d := startDevUp(t, "-v", "--controllers=")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(d.stderr(), "[kube-apiserver] ") {
		if time.Now().After(deadline) {
			t.Fatalf("no kube-apiserver log line on stderr with -v:\n%.2000s", d.stderr())
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.interrupt(t)
}

// TestDevUpNode runs `dev up --node`: the table places the servers on the node's address, a
// Deployment of the site image injected with an s3-target Decofile cold-starts from the object
// (over the pod network, with the http URL the webhook injects), and SIGINT leaves nothing of
// the node on the machine.
func TestDevUpNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a local control plane and a node")
	}
	images, _ := filepath.Abs(filepath.Join("..", "..", devenv.DefaultImagesDir))
	if err := devenv.CheckNode(images); err != nil {
		t.Skipf("no real node here: %v", err)
	}
	rulesBefore := iptablesRules(t)
	d := startDevUp(t, "--node", "--images", images, "--controllers=decofile")
	table := d.table(t)
	m := regexp.MustCompile(`^(siteops-node-(\d+)) at (10\.244\.\d+\.1),`).FindStringSubmatch(table["node"])
	if m == nil {
		t.Fatalf("node row %q, want siteops-node-<slot> at 10.244.x.1", table["node"])
	}
	nodeName, slot, nodeIP := m[1], m[2], m[3]
	for _, name := range []string{"Valkey master", "Valkey replica", "Valkey Sentinels", "Redis (mirror)", "S3", "git remote"} {
		if !strings.Contains(table[name], nodeIP+":") {
			t.Errorf("%s at %q, want the node's address %s", name, table[name], nodeIP)
		}
	}

	ctx := context.Background()
	c := d.client(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "devup-node"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	df := &decov1alpha1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: ns.Name},
		Spec: decov1alpha1.DecofileSpec{Source: decov1alpha1.SourceInline, Target: decov1alpha1.TargetS3, Inline: &decov1alpha1.InlineSource{
			Value: map[string]apiextensionsv1.JSON{"home": {Raw: []byte(`{"title":"from the dev S3"}`)}},
		}},
	}
	if err := c.Create(ctx, df); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(df), df); err != nil {
			return err
		}
		if df.Status.S3URL == "" {
			return fmt.Errorf("not uploaded yet: %+v", df.Status.Conditions)
		}
		// Deployments need the namespace's default ServiceAccount (kube-controller-manager).
		return c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "default"}, &corev1.ServiceAccount{})
	})
	if !strings.HasPrefix(df.Status.S3URL, "http://"+nodeIP+":") {
		t.Fatalf("status.s3URL %s, want the plain-HTTP server on %s", df.Status.S3URL, nodeIP)
	}
	ref := devenvImageRef(t, images)
	labels := map[string]string{"app": "site"}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: ns.Name, Annotations: map[string]string{decov1alpha1.AnnotationInject: df.Name}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				AutomountServiceAccountToken: ptr(false), TerminationGracePeriodSeconds: ptr(int64(1)),
				Containers: []corev1.Container{{Name: "site", Image: ref, ImagePullPolicy: corev1.PullNever,
					Args: []string{"--addr", "0.0.0.0:8000"}}},
			}},
		},
	}
	if err := c.Create(ctx, deploy); err != nil {
		t.Fatal(err)
	}
	var pod corev1.Pod
	testenv.Eventually(t, 60*time.Second, func() error {
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns.Name), client.MatchingLabels(labels)); err != nil {
			return err
		}
		if len(pods.Items) != 1 || pods.Items[0].Status.Phase != corev1.PodRunning || pods.Items[0].Status.PodIP == "" {
			return fmt.Errorf("pods: %d, want one Running", len(pods.Items))
		}
		pod = pods.Items[0]
		return nil
	})
	var body string
	testenv.Eventually(t, 20*time.Second, func() error {
		resp, err := http.Get("http://" + pod.Status.PodIP + ":8000/.decofile?content=true")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		body = string(b)
		return err
	})
	if !strings.Contains(body, "from the dev S3") {
		t.Fatalf("pod %s on %s does not serve the object it should have cold-started from: %q", pod.Name, pod.Spec.NodeName, body)
	}
	if pod.Spec.NodeName != nodeName {
		t.Fatalf("pod ran on %q, want %s", pod.Spec.NodeName, nodeName)
	}

	children := descendants(d.cmd.Process.Pid)
	d.interrupt(t)
	for _, pid := range children {
		if alive(pid) {
			t.Errorf("process %d (%s) still running after dev up exited", pid, comm(pid))
		}
	}
	for _, left := range []string{"/run/netns/siteops-node-" + slot, "/sys/class/net/sonode" + slot, "/run/siteops-node/" + slot + ".lock"} {
		if _, err := os.Stat(left); err == nil {
			t.Errorf("left behind: %s", left)
		}
	}
	cgroups, _ := filepath.Glob("/sys/fs/cgroup/*/" + nodeName)
	if len(cgroups) > 0 {
		t.Errorf("cgroups left behind: %v", cgroups)
	}
	if after := iptablesRules(t); after != rulesBefore {
		t.Errorf("the machine's iptables rules changed:\nbefore:\n%s\nafter:\n%s", rulesBefore, after)
	}
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// siteopsBinary builds the CLI once per test binary.
func siteopsBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "siteops-devup-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "siteops")
		if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("build siteops: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// devUp is a running `siteops dev up` process.
type devUp struct {
	cmd        *exec.Cmd
	kubeconfig string
	mu         sync.Mutex
	out, err   bytes.Buffer
	waited     chan error
}

func (d *devUp) stdout() string { d.mu.Lock(); defer d.mu.Unlock(); return d.out.String() }
func (d *devUp) stderr() string { d.mu.Lock(); defer d.mu.Unlock(); return d.err.String() }

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// startDevUp runs `siteops dev up` with args and waits for its ready line.
func startDevUp(t *testing.T, args ...string) *devUp {
	t.Helper()
	bin := siteopsBinary(t)
	d := &devUp{kubeconfig: filepath.Join(t.TempDir(), "state", "kubeconfig"), waited: make(chan error, 1)}
	d.cmd = exec.Command(bin, append([]string{"dev", "up", "--kubeconfig", d.kubeconfig}, args...)...)
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	d.cmd.Stderr = lockedWriter{&d.mu, &d.err}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = d.cmd.Process.Kill()
		if t.Failed() {
			t.Logf("dev up stdout:\n%s\nstderr:\n%.3000s", d.stdout(), d.stderr())
		}
	})
	ready := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			line := s.Text()
			d.mu.Lock()
			d.out.WriteString(line + "\n")
			d.mu.Unlock()
			if strings.HasPrefix(line, devenv.ReadyLine) {
				ready <- line
			}
		}
		d.waited <- d.cmd.Wait()
	}()
	select {
	case line := <-ready:
		if want := devenv.ReadyLine + " (kubeconfig: " + d.kubeconfig + ")"; line != want {
			t.Fatalf("ready line = %q, want %q", line, want)
		}
	case err := <-d.waited:
		t.Fatalf("siteops dev up exited before it was ready: %v", err)
	case <-time.After(3 * time.Minute):
		t.Fatal("siteops dev up did not print its ready line within 3 minutes")
	}
	return d
}

// table parses the component table printed before the ready line: name → address.
func (d *devUp) table(t *testing.T) map[string]string {
	t.Helper()
	rows := map[string]string{}
	in := false
	for _, line := range strings.Split(d.stdout(), "\n") {
		fields := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1)
		switch {
		case len(fields) >= 2 && fields[0] == "COMPONENT":
			in = true
		case in && len(fields) >= 2:
			if rows[fields[0]] == "" {
				rows[fields[0]] = fields[1]
			}
		default:
			in = false
		}
	}
	if len(rows) == 0 {
		t.Fatalf("no component table before the ready line:\n%s", d.stdout())
	}
	for _, line := range strings.Split(d.stdout(), "\n") {
		if line != "" && !strings.HasPrefix(line, "siteops dev: ") && !strings.HasPrefix(line, "  ") {
			t.Errorf("unexpected output line (not progress, table or ready line): %q", line)
		}
	}
	return rows
}

func (d *devUp) client(t *testing.T) client.Client {
	t.Helper()
	// The test reads no controller-runtime logs; without a logger it prints a stack instead.
	ctrllog.SetLogger(logr.Discard())
	cfg, err := clientcmd.BuildConfigFromFlags("", d.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.New()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// interrupt sends SIGINT, as Ctrl-C does, and waits for a clean exit.
func (d *devUp) interrupt(t *testing.T) {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-d.waited:
		if err != nil {
			t.Fatalf("siteops dev up exited with %v after SIGINT, want 0", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("siteops dev up did not exit within a minute of SIGINT")
	}
}

func devenvImageRef(t *testing.T, dir string) string {
	t.Helper()
	images, err := devenv.ImageArchives(dir)
	if err != nil {
		t.Fatal(err)
	}
	return images[devenv.SiteImage].Ref
}

func iptablesRules(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("iptables-save").Output()
	if err != nil {
		t.Skipf("iptables-save: %v", err)
	}
	// Counters change; the rules must not.
	return regexp.MustCompile(`(?m)^#.*$|\[\d+:\d+\]`).ReplaceAllString(string(out), "")
}

func ptr[T any](v T) *T { return &v }

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
