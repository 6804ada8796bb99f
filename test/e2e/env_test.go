package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/image"
	"github.com/siteops/siteops/internal/node"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// probeRef is the image reference of the cache probe built by the test.
const probeRef = "siteops-e2e-cacheprobe:test"

// env is what the steps share: the API server, the node, the servers the pods reach, and what
// earlier steps created.
type env struct {
	// top is the whole test: what outlives a step is cleaned up when it ends.
	top *testing.T
	c   *testenv.Cluster
	n   *node.Node
	kc  string // kubeconfig file of the admin

	managerRef, siteRef string

	git    *servers.GitRemote
	valkey *servers.Process // the tenant part's Valkey
	redis  *servers.Process // the mirror's cursors and attribution facts
	// The default users' passwords of valkey and redis: pods reach both servers, and only the
	// manager may use them as anything but a tenant's ACL user.
	valkeyPassword, redisPassword string

	// namespaces are deleted, and awaited, before the chart is uninstalled: the manager removes
	// the finalizers it put on them.
	namespaces []string

	release  string // chart release and namespace
	site     *siteRepo
	siteNS   string
	sitePods []corev1.Pod
	// mirrorNS holds the GitTarget "main" of step 7, which mirrors its ConfigMaps to the bare
	// repository mirrorRepo.
	mirrorNS, mirrorRepo string
}

// newEnv builds the cache probe image, starts the node with the three images, and starts the
// git remote, Valkey and Redis on the node's machine-side address.
func newEnv(t *testing.T, c *testenv.Cluster) *env {
	managerArchive := testenv.ImageArchive(t, "siteops-manager")
	siteArchive := testenv.ImageArchive(t, "siteops-site")
	probeArchive := buildProbeImage(t)
	e := &env{top: t, c: c, managerRef: testenv.ImageRef(t, managerArchive), siteRef: testenv.ImageRef(t, siteArchive)}
	start := time.Now()
	e.n = c.Node(t, managerArchive, siteArchive, probeArchive)
	t.Logf("node %s Ready in %s (node address %s, pods %s)", e.n.Name, time.Since(start).Round(time.Millisecond), e.n.IP, e.n.PodCIDR)
	e.kc = filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(e.kc, c.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	// Pods reach the machine's end of the node's veth, and nothing else outside the node.
	e.git = testenv.GitRemote(t, servers.GitRemoteOptions{Host: e.n.IP})
	e.valkeyPassword, e.redisPassword = rand.Text(), rand.Text()
	e.valkey = testenv.Redis(t, servers.RedisOptions{Host: e.n.IP, Password: e.valkeyPassword})
	e.redis = testenv.Redis(t, servers.RedisOptions{Host: e.n.IP, Password: e.redisPassword})
	return e
}

// buildProbeImage compiles ./cacheprobe statically and packs it like `make image` packs the
// project's binaries.
func buildProbeImage(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "cacheprobe")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./cacheprobe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the cache probe: %v\n%s", err, out)
	}
	img, err := image.Build(image.Spec{Binary: bin, CABundle: "/etc/ssl/certs/ca-certificates.crt"})
	if err != nil {
		t.Fatalf("cache probe image: %v", err)
	}
	archive := filepath.Join(dir, "cacheprobe.tar")
	if _, err := image.WriteArchive(archive, probeRef, img); err != nil {
		t.Fatal(err)
	}
	return archive
}

// namespace creates a namespace that is deleted, and awaited, before the chart is uninstalled.
func (e *env) namespace(t *testing.T, prefix string, annotations map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-", Annotations: annotations}}
	if err := e.c.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	e.namespaces = append(e.namespaces, ns.Name)
	return ns.Name
}

// deleteNamespaces deletes the steps' namespaces and waits until they are gone (their pods
// stopped by the kubelet, the manager's finalizers removed).
func (e *env) deleteNamespaces(t *testing.T) {
	ctx := context.Background()
	for _, name := range e.namespaces {
		_ = e.c.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	deadline := time.Now().Add(90 * time.Second)
	for _, name := range e.namespaces {
		for {
			err := e.c.Client.Get(ctx, client.ObjectKey{Name: name}, &corev1.Namespace{})
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("namespace %s still there 90 s after its deletion (%v)", name, err)
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// redisClient is a client of p as its default user.
func redisClient(t *testing.T, p *servers.Process, password string) *redis.Client {
	t.Helper()
	r := redis.NewClient(&redis.Options{Addr: p.Addr, Password: password})
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// must fails the test on err.
func must(t *testing.T, err error, what string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(what, args...), err)
	}
}
