package node_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.NodeAPIServerOptions(servers.APIServerOptions{}))
}

// TestNodeRunsSitePod brings a real node up, runs the site-runtime image on it with the
// Decofile from a mounted ConfigMap and the reload token from a Secret, reads it through the pod
// IP, and checks that stopping the node leaves nothing on the machine.
func TestNodeRunsSitePod(t *testing.T) {
	c := testenv.APIServer(t)
	testenv.RequireNode(t)
	site := testenv.ImageArchive(t, "siteops-site")
	rulesBefore := iptablesRules(t)

	start := time.Now()
	n := c.Node(t, site)
	t.Logf("node %s (%s, pods %s) Ready in %s", n.Name, n.IP, n.PodCIDR, time.Since(start).Round(time.Millisecond))

	ctx := context.Background()
	ns := c.PodNamespace(t, "node")
	const token = "reload-token-0123456789"
	objs := []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "deco", Namespace: ns},
			Data: map[string]string{"decofile.json": `{"site":{"title":"from the mounted ConfigMap"}}`}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "reload", Namespace: ns},
			StringData: map[string]string{"token": token}},
		sitePod(ns, n.Name, testenv.ImageRef(t, site)),
	}
	for _, o := range objs {
		if err := c.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	podStart := time.Now()
	var pod corev1.Pod
	testenv.Eventually(t, 60*time.Second, func() error {
		if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "site"}, &pod); err != nil {
			return err
		}
		if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" {
			return fmt.Errorf("pod %s, IP %q, conditions %v", pod.Status.Phase, pod.Status.PodIP, pod.Status.ContainerStatuses)
		}
		return nil
	})
	t.Logf("pod Running at %s after %s", pod.Status.PodIP, time.Since(podStart).Round(time.Millisecond))

	base := "http://" + pod.Status.PodIP + ":8000"
	var body string
	testenv.Eventually(t, 20*time.Second, func() error {
		var err error
		body, err = get(base + "/.decofile?content=true")
		return err
	})
	if !strings.Contains(body, "from the mounted ConfigMap") {
		t.Fatalf("the pod does not serve the mounted Decofile: %s", body)
	}

	// The token reached the container through secretKeyRef: the right one is accepted, a wrong
	// one refused.
	push := `{"timestamp": 2000000000, "source": "test", "decofile": {"site": {"title": "pushed"}}}`
	if code := post(t, base+decov1alpha1.ReloadPath, "wrong-token", push); code != http.StatusUnauthorized {
		t.Fatalf("reload with a wrong token: status %d, want 401", code)
	}
	if code := post(t, base+decov1alpha1.ReloadPath, token, push); code != http.StatusOK {
		t.Fatalf("reload with the Secret's token: status %d, want 200", code)
	}
	if body, err := get(base + "/.decofile?content=true"); err != nil || !strings.Contains(body, "pushed") {
		t.Fatalf("after the push the pod serves %q (%v)", body, err)
	}

	// The API server reaches the kubelet with its client certificate: the container's log.
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	logs, err := cs.CoreV1().Pods(ns).GetLogs("site", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil || !strings.Contains(string(logs), "reload enabled") {
		t.Fatalf("pod log through the API server: %q (%v)", logs, err)
	}

	stopStart := time.Now()
	if err := n.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	t.Logf("node stopped in %s", time.Since(stopStart).Round(time.Millisecond))
	if left := n.Leftovers(); len(left) > 0 {
		t.Fatalf("the node left behind: %s", strings.Join(left, "; "))
	}
	if after := iptablesRules(t); after != rulesBefore {
		t.Fatalf("the machine's iptables rules changed:\nbefore:\n%s\nafter:\n%s", rulesBefore, after)
	}
	if _, err := get(base + "/.decofile"); err == nil {
		t.Fatal("the pod still answers after Stop")
	}
}

func sitePod(ns, nodeName, image string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:                      nodeName,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name:            "site",
				Image:           image,
				ImagePullPolicy: corev1.PullNever,
				Args:            []string{"--addr", "0.0.0.0:8000"},
				Env: []corev1.EnvVar{
					{Name: decov1alpha1.EnvRelease, Value: "file:///deco/decofile.json"},
					{Name: decov1alpha1.EnvReloadToken, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: "reload"}, Key: "token"}}},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "deco", MountPath: "/deco", ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "deco", VolumeSource: corev1.VolumeSource{
				ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "deco"}}}}},
		},
	}
}

var httpClient = &http.Client{Timeout: 3 * time.Second}

func get(url string) (string, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b), err
}

func post(t *testing.T, url, token, body string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Token "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// iptablesRules is the machine's iptables rule set without comments and counters.
func iptablesRules(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("iptables-save").Output()
	if err != nil {
		t.Skipf("iptables-save: %v", err)
	}
	var keep []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		if i := strings.Index(l, " ["); strings.HasPrefix(l, ":") && i > 0 {
			l = l[:i]
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "\n")
}

// TestNodeRunsDeployment runs the site image as a Deployment: kube-controller-manager makes the
// Pods, kube-scheduler places them on the node, and each answers at its pod IP.
func TestNodeRunsDeployment(t *testing.T) {
	c := testenv.APIServer(t)
	c.Controllers(t)
	site := testenv.ImageArchive(t, "siteops-site")
	n := c.Node(t, site)
	ctx := context.Background()
	ns := c.PodNamespace(t, "deploy")
	labels := map[string]string{"app": "site"}
	pod := sitePod(ns, "", testenv.ImageRef(t, site))
	pod.Spec.Containers[0].Env = nil
	pod.Spec.Containers[0].VolumeMounts, pod.Spec.Volumes = nil, nil
	// Only this test's node: Nodes of other tests may linger in the shared API server.
	pod.Spec.NodeSelector = map[string]string{corev1.LabelHostname: n.Name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod.Spec},
		},
	}
	start := time.Now()
	if err := c.Client.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	var pods corev1.PodList
	testenv.Eventually(t, 90*time.Second, func() error {
		if err := c.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
			return err
		}
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && p.Spec.NodeName == n.Name {
				running++
			}
		}
		if running != 2 {
			return fmt.Errorf("%d of %d pods Running on %s", running, len(pods.Items), n.Name)
		}
		return nil
	})
	t.Logf("2 replicas Running after %s", time.Since(start).Round(time.Millisecond))
	for _, p := range pods.Items {
		ip := p.Status.PodIP
		testenv.Eventually(t, 20*time.Second, func() error {
			_, err := get("http://" + ip + ":8000/.decofile")
			return err
		})
	}

	// kube-proxy routes a Service to them: its NodePort from the machine (through the veth),
	// its ClusterIP from inside the node's network namespace.
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: ns},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: labels,
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8000)}}},
	}
	if err := c.Client.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	nodePort := fmt.Sprintf("http://%s:%d/.decofile", n.NetnsIP, svc.Spec.Ports[0].NodePort)
	testenv.Eventually(t, 30*time.Second, func() error { _, err := get(nodePort); return err })
	t.Logf("Service answers at its NodePort %s after %s", nodePort, time.Since(start).Round(time.Millisecond))
	testenv.Eventually(t, 10*time.Second, func() error {
		return getInNetns("/run/netns/"+n.Netns, fmt.Sprintf("%s:80", svc.Spec.ClusterIP))
	})

	// Name resolution is checked from a pod (TestNodePodReachesServiceByName), the way sites use
	// it: asked from the machine, the node's CoreDNS once refused connections for a whole node's
	// life under a loaded test run (docs/development.md).
}

// getInNetns sends GET /.decofile to addr from inside a network namespace: a socket belongs to
// the namespace of the thread that creates it.
func getInNetns(netnsPath, addr string) error {
	errc := make(chan error, 1)
	go func() {
		// The thread is never unlocked, so it ends with this goroutine instead of carrying the
		// namespace back into the pool.
		runtime.LockOSThread()
		f, err := os.Open(netnsPath)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter %s: %w", netnsPath, err)
			return
		}
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := io.WriteString(c, "GET /.decofile HTTP/1.0\r\n\r\n"); err != nil {
			errc <- err
			return
		}
		b, _ := io.ReadAll(c)
		if !strings.HasPrefix(string(b), "HTTP/1.0 200") {
			errc <- fmt.Errorf("GET %s in %s: %.60q", addr, netnsPath, b)
			return
		}
		errc <- nil
	}()
	return <-errc
}

// TestNodePodTalksToAPIServer runs the manager image as a pod: with its ServiceAccount token it
// reaches the API server in-cluster (the `kubernetes` Service, through kube-proxy and the node's
// relay, verifying the API server's certificate) and takes the leader Lease.
func TestNodePodTalksToAPIServer(t *testing.T) {
	c := testenv.APIServer(t)
	manager := testenv.ImageArchive(t, "siteops-manager")
	n := c.Node(t, manager)
	ctx := context.Background()
	ns := c.PodNamespace(t, "manager")
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-manager"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "default", Namespace: ns}},
	}
	if err := c.Client.Create(ctx, crb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), crb) })
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "manager", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:                      n.Name,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{
				Name: "manager", Image: testenv.ImageRef(t, manager), ImagePullPolicy: corev1.PullNever,
				Args: []string{"--leader-elect", "--leader-election-namespace=" + ns, "--metrics-bind-address=0",
					"--controllers=decofile", "--webhook-self-signed", "--webhook-cert-dir=/tmp/certs"},
			}},
		},
	}
	if err := c.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		var lease coordinationv1.Lease
		err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "siteops-manager.siteops.dev"}, &lease)
		if err == nil && lease.Spec.HolderIdentity != nil && strings.HasPrefix(*lease.Spec.HolderIdentity, "manager") {
			t.Logf("the manager pod holds the Lease (%s) after %s", *lease.Spec.HolderIdentity, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			logs, _ := cs.CoreV1().Pods(ns).GetLogs("manager", &corev1.PodLogOptions{}).DoRaw(ctx)
			_ = c.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod)
			t.Fatalf("no Lease held by the manager pod after 60 s (lease: %v); pod %s %v; log:\n%s", err, pod.Status.Phase, pod.Status.ContainerStatuses, logs)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestNodePodReachesServiceByName has one site pod load its Decofile over HTTP from another
// through a Service name: the pod's resolver asks the node's CoreDNS, and kube-proxy routes the
// ClusterIP to a pod on the same bridge.
func TestNodePodReachesServiceByName(t *testing.T) {
	c := testenv.APIServer(t)
	site := testenv.ImageArchive(t, "siteops-site")
	n := c.Node(t, site)
	ctx := context.Background()
	ns := c.PodNamespace(t, "dns")
	origin := sitePod(ns, n.Name, testenv.ImageRef(t, site))
	origin.Name, origin.Labels = "origin", map[string]string{"app": "origin"}
	host := "origin." + ns + ".svc.cluster.local"
	reader := sitePod(ns, n.Name, testenv.ImageRef(t, site))
	reader.Name = "reader"
	reader.Spec.Containers[0].Env = []corev1.EnvVar{
		{Name: decov1alpha1.EnvRelease, Value: "http://" + host + "/.decofile?content=true"},
		{Name: decov1alpha1.EnvAllowedAuthorities, Value: host},
	}
	reader.Spec.Containers[0].VolumeMounts, reader.Spec.Volumes = nil, nil
	objs := []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "deco", Namespace: ns},
			Data: map[string]string{"decofile.json": `{"site":{"title":"served by origin"}}`}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "reload", Namespace: ns}, StringData: map[string]string{"token": "t"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "origin", Namespace: ns}, Spec: corev1.ServiceSpec{
			Selector: origin.Labels, Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8000)}}}},
		origin, reader,
	}
	for _, o := range objs {
		if err := c.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	// The reader exits until the origin answers; the kubelet restarts it.
	testenv.Eventually(t, 90*time.Second, func() error {
		var p corev1.Pod
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(reader), &p); err != nil {
			return err
		}
		if p.Status.PodIP == "" {
			return fmt.Errorf("reader has no IP yet (%s)", p.Status.Phase)
		}
		body, err := get("http://" + p.Status.PodIP + ":8000/.decofile?content=true")
		if err != nil {
			return err
		}
		if !strings.Contains(body, "served by origin") {
			return fmt.Errorf("reader serves %s", body)
		}
		return nil
	})
	t.Logf("the reader pod loaded its Decofile from %s after %s", host, time.Since(start).Round(time.Millisecond))
}
