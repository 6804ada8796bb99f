package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/siteops/siteops/internal/node"
	"github.com/siteops/siteops/internal/servers"
)

// nodeAccess is the kubelet client certificate of the API servers NodeAPIServerOptions made.
var nodeAccess *node.APIAccess

// NodeAPIServerOptions returns o with what a real node needs of the API server (see
// node.APIServerFlags): a kubelet client certificate, a serving certificate that names the
// `kubernetes` Service so pods can verify it, and the ServiceAccount admission plugin on, so
// pods get the token they use in-cluster. Pass it to Main or NewAPIServer in packages that call
// (*Cluster).Node; pods then need their namespace's default ServiceAccount, which the
// controllers (*Cluster).Node starts create.
func NodeAPIServerOptions(o servers.APIServerOptions) servers.APIServerOptions {
	configure := o.Configure
	o.Configure = func(env *envtest.Environment) {
		if configure != nil {
			configure(env)
		}
		api := env.ControlPlane.GetAPIServer()
		if dir, err := nodeCertDir(); err == nil {
			if nodeAccess == nil {
				nodeAccess, _ = node.NewAPIAccess(filepath.Join(dir, "kubelet-client"))
			}
			// envtest generates certificates only into an empty cert-dir.
			if certs, err := node.NewAPIServerCerts(filepath.Join(dir, "apiserver")); err == nil {
				api.CertDir = certs.Dir
				api.CA = certs.CAPEM
			}
		}
		args := api.Configure()
		for k, v := range node.APIServerFlags(nodeAccess) {
			args.Set(k, v)
		}
		// envtest turns ServiceAccount off because nothing creates default ServiceAccounts
		// without kube-controller-manager; with a node it runs.
		args.Set("disable-admission-plugins", "StorageObjectInUseProtection")
	}
	return o
}

// nodeCertDir creates a folder for this process's API server certificates, named after the
// process so that the next test binary removes it once the process is gone (nothing runs after
// the API server stops to remove it earlier).
func nodeCertDir() (string, error) {
	const prefix = "siteops-node-certs-"
	old, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*"))
	for _, d := range old {
		pid, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), prefix), "-")
		if _, err := os.Stat(filepath.Join("/proc", pid)); err != nil && pid != "" {
			_ = os.RemoveAll(d)
		}
	}
	return os.MkdirTemp("", fmt.Sprintf("%s%d-", prefix, os.Getpid()))
}

// RequireNode skips the test unless a real node can run here: root, the node's binaries
// (`make node-tools`) and the machine's tools.
func RequireNode(t testing.TB) {
	t.Helper()
	requireIntegration(t)
	if os.Geteuid() != 0 {
		t.Skip("a real node needs root (namespaces, mounts, cgroups)")
	}
	if err := node.CheckBinaries(servers.AssetsDir()); err != nil {
		t.Skipf("a real node cannot run here: %v", err)
	}
}

// ImageArchive is the path of bin/images/<name>.tar (`make image`); it skips the test when the
// archive is missing.
func ImageArchive(t testing.TB, name string) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Skipf("image archive %s.tar: %v", name, err)
	}
	p := filepath.Join(root, "bin", "images", name+".tar")
	if _, err := os.Stat(p); err != nil {
		t.Skipf("image archive %s missing: run `make image`", p)
	}
	return p
}

// ImageRef is the reference an image archive is tagged with (`make image` tags them with the
// chart's appVersion), for a Pod's image.
func ImageRef(t testing.TB, archive string) string {
	t.Helper()
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(archive) })
	if err != nil || len(m) == 0 || len(m[0].RepoTags) == 0 {
		t.Fatalf("image archive %s: no tagged image (%v)", archive, err)
	}
	return m[0].RepoTags[0]
}

// Node starts a real node (kubelet, containerd, runc, CNI bridge) joined to c with the given
// image archives imported, and stops it when the test ends, failing the test if anything of it
// is left on the machine. It skips when RequireNode does. The API server must have been
// started with NodeAPIServerOptions.
func (c *Cluster) Node(t testing.TB, images ...string) *node.Node {
	t.Helper()
	RequireNode(t)
	c.Controllers(t)
	// What nodes of killed test binaries left (their network namespaces, veths, cgroups).
	if err := node.Sweep(context.Background()); err != nil {
		t.Logf("sweep leftovers of earlier nodes: %v", err)
	}
	// A short folder: containerd's socket path must fit in 107 bytes.
	dir, err := os.MkdirTemp("", "node-")
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Start(context.Background(), node.Options{
		KubeConfig: c.KubeConfig, Dir: dir, Images: images, APIAccess: nodeAccess,
	})
	if err != nil {
		logTails(t, dir)
		t.Fatalf("start node: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logTails(t, dir)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := n.Stop(ctx); err != nil {
			t.Errorf("stop node: %v", err)
		}
		if left := n.Leftovers(); len(left) > 0 {
			t.Errorf("the node left behind: %s", strings.Join(left, "; "))
		}
		if !t.Failed() {
			_ = os.RemoveAll(dir)
		}
	})
	return n
}

var (
	controllersMu sync.Mutex
	controllers   = map[*Cluster]*runningControllers{}
)

type runningControllers struct {
	ctl   *node.Controllers
	users int
}

// Controllers runs kube-scheduler and kube-controller-manager for c while the test (and any
// other test using them on c) runs, so Deployments, scheduling and namespace deletion work.
// They are stopped before the API server, which would otherwise wait for their watches to end.
// It skips like RequireNode.
func (c *Cluster) Controllers(t testing.TB) {
	t.Helper()
	RequireNode(t)
	controllersMu.Lock()
	defer controllersMu.Unlock()
	r := controllers[c]
	if r == nil {
		dir, err := os.MkdirTemp("", "siteops-controllers-")
		if err != nil {
			t.Fatal(err)
		}
		ctl, err := node.StartControllers(context.Background(), c.KubeConfig, dir, "")
		if err != nil {
			t.Fatalf("start kube-scheduler and kube-controller-manager: %v", err)
		}
		r = &runningControllers{ctl: ctl}
		controllers[c] = r
	}
	r.users++
	t.Cleanup(func() {
		controllersMu.Lock()
		defer controllersMu.Unlock()
		if r.users--; r.users > 0 {
			return
		}
		delete(controllers, c)
		if err := r.ctl.Stop(); err != nil {
			t.Errorf("stop controllers: %v", err)
		}
		if !t.Failed() {
			_ = os.RemoveAll(r.ctl.Dir)
		}
	})
}

// PodNamespace creates a namespace like Namespace and waits for its default ServiceAccount
// (made by kube-controller-manager), without which the API server refuses pods.
func (c *Cluster) PodNamespace(t testing.TB, prefix string) string {
	t.Helper()
	ns := c.Namespace(t, prefix, nil)
	Eventually(t, 30*time.Second, func() error {
		return c.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "default"}, &corev1.ServiceAccount{})
	})
	return ns
}

// logTails logs the last lines of the node's logs.
func logTails(t testing.TB, dir string) {
	t.Helper()
	for _, name := range []string{"node.log", "containerd.log", "kubelet.log"} {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		var lines []string
		s := bufio.NewScanner(f)
		s.Buffer(make([]byte, 1<<20), 1<<20)
		for s.Scan() {
			lines = append(lines, s.Text())
			if len(lines) > 25 {
				lines = lines[1:]
			}
		}
		f.Close()
		t.Logf("%s (last lines, folder %s):\n%s", name, dir, strings.Join(lines, "\n"))
	}
}

// moduleRoot is the folder of the go.mod above the working directory (a test runs in its
// package's folder). Source paths cannot tell it: `make test` builds with -trimpath.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
