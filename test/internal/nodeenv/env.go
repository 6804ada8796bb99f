package nodeenv

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

// ProbeRef is the image reference of the cache probe (test/cacheprobe) the node runs.
const ProbeRef = "siteops-e2e-cacheprobe:test"

// Options configures New.
type Options struct {
	// ValkeySentinels runs the tenant part's Valkey as a master, one replica and three
	// Sentinels (ValkeySet) instead of one server.
	ValkeySentinels bool
	// S3 runs an S3 server and a CDN in front of it for the Decofile s3 target (Env.S3); the
	// chart is configured for them.
	S3 bool
}

// Env is the API server, the node, and the servers the pods reach.
type Env struct {
	// T is the whole test: what outlives a step is cleaned up when it ends.
	T  *testing.T
	C  *testenv.Cluster
	N  *node.Node
	KC string // kubeconfig file of the admin

	ManagerRef, SiteRef string

	Git *servers.GitRemote
	// Valkey is the tenant part's Valkey (the master at start when ValkeySet is set).
	Valkey    *servers.Process
	ValkeySet *servers.SentinelSet
	// Redis holds the mirror's cursors and attribution facts.
	Redis *servers.Process
	// S3 is the s3 target's server and CDN, with Options.S3.
	S3 *S3
	// The default users' passwords of Valkey and Redis: pods reach both servers, and only the
	// manager may use them as anything but a tenant's ACL user.
	ValkeyPassword, RedisPassword string

	// Release is the chart's release and namespace, once installed.
	Release string
	// namespaces are deleted, and awaited, before the chart is uninstalled: the manager removes
	// the finalizers it put on them.
	namespaces []string
}

// New builds the cache probe image, starts the node with the manager, site and probe images,
// and starts the git remote, Valkey and Redis on the node's machine-side address.
func New(t *testing.T, c *testenv.Cluster, o Options) *Env {
	if auditCerts == nil {
		t.Fatal("the API server started without its audit webhook configuration (see TestMain's output)")
	}
	managerArchive := testenv.ImageArchive(t, "siteops-manager")
	siteArchive := testenv.ImageArchive(t, "siteops-site")
	probeArchive := buildProbeImage(t)
	e := &Env{T: t, C: c, ManagerRef: testenv.ImageRef(t, managerArchive), SiteRef: testenv.ImageRef(t, siteArchive)}
	start := time.Now()
	e.N = c.Node(t, managerArchive, siteArchive, probeArchive)
	t.Logf("node %s Ready in %s (node address %s, pods %s)", e.N.Name, time.Since(start).Round(time.Millisecond), e.N.IP, e.N.PodCIDR)
	e.KC = filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(e.KC, c.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	// Pods reach the machine's end of the node's veth, and nothing else outside the node.
	e.Git = testenv.GitRemote(t, servers.GitRemoteOptions{Host: e.N.IP})
	e.ValkeyPassword, e.RedisPassword = rand.Text(), rand.Text()
	if o.ValkeySentinels {
		e.ValkeySet = testenv.SentinelSet(t, servers.SentinelSetOptions{Host: e.N.IP, Password: e.ValkeyPassword, Replicas: 1})
		e.Valkey = e.ValkeySet.Master
	} else {
		e.Valkey = testenv.Redis(t, servers.RedisOptions{Host: e.N.IP, Password: e.ValkeyPassword})
	}
	e.Redis = testenv.Redis(t, servers.RedisOptions{Host: e.N.IP, Password: e.RedisPassword})
	if o.S3 {
		e.S3 = startS3(t, e.N.IP)
	}
	return e
}

// buildProbeImage compiles test/cacheprobe statically and packs it like `make image` packs the
// project's binaries.
func buildProbeImage(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "cacheprobe")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "github.com/siteops/siteops/test/cacheprobe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the cache probe: %v\n%s", err, out)
	}
	img, err := image.Build(image.Spec{Binary: bin, CABundle: "/etc/ssl/certs/ca-certificates.crt"})
	if err != nil {
		t.Fatalf("cache probe image: %v", err)
	}
	archive := filepath.Join(dir, "cacheprobe.tar")
	if _, err := image.WriteArchive(archive, ProbeRef, img); err != nil {
		t.Fatal(err)
	}
	return archive
}

// Namespace creates a namespace that is deleted, and awaited, before the chart is uninstalled.
func (e *Env) Namespace(t testing.TB, prefix string, annotations map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-", Annotations: annotations}}
	if err := e.C.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	e.namespaces = append(e.namespaces, ns.Name)
	return ns.Name
}

// TrackNamespace has namespace name, made by commands a test ran, deleted and awaited before
// the chart is uninstalled, like the ones Namespace makes.
func (e *Env) TrackNamespace(name string) { e.namespaces = append(e.namespaces, name) }

// deleteNamespaces deletes the tests' namespaces and waits until they are gone (their pods
// stopped by the kubelet, the manager's finalizers removed).
func (e *Env) deleteNamespaces(t testing.TB) {
	ctx := context.Background()
	for _, name := range e.namespaces {
		_ = e.C.Client.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	}
	deadline := time.Now().Add(90 * time.Second)
	for _, name := range e.namespaces {
		for {
			var ns corev1.Namespace
			err := e.C.Client.Get(ctx, client.ObjectKey{Name: name}, &ns)
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("namespace %s still there 90 s after its deletion (%v): finalizers %v, conditions %+v", name, err, ns.Finalizers, ns.Status.Conditions)
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// RedisClient is a client of p as its default user.
func RedisClient(t testing.TB, p *servers.Process, password string) *redis.Client {
	t.Helper()
	r := redis.NewClient(&redis.Options{Addr: p.Addr, Password: password})
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// Must fails the test on err.
func Must(t testing.TB, err error, what string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(what, args...), err)
	}
}

// WaitFor polls check every 100 ms until it returns nil, failing the test with the last error
// after timeout; it returns how long it took.
func WaitFor(t testing.TB, timeout time.Duration, what string, check func(context.Context) error) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := check(ctx)
		cancel()
		if err == nil {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not done after %s: %v", what, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
