// Package testenv gives tests the real servers of internal/servers, each started on a free
// loopback port for one test (or shared by one test package) and stopped when it ends.
package testenv

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/scheme"
	"github.com/siteops/siteops/internal/servers"
)

// Cluster is the package's shared API server with a client for it.
type Cluster struct {
	*servers.APIServer
	// Scheme knows every siteops and built-in type.
	Scheme *runtime.Scheme
	// Client is an admin client.
	Client client.Client
}

var (
	shared     *Cluster
	sharedErr  error
	sharedOnce sync.Once
	sharedOpts servers.APIServerOptions
)

// Main runs a test package whose tests share one API server, started on first use with opts and
// stopped after the last test. Call it from TestMain.
func Main(m *testing.M, opts servers.APIServerOptions) {
	flag.Parse()
	sharedOpts = opts
	code := m.Run()
	if shared != nil {
		if err := shared.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "testenv: stop API server:", err)
		}
	}
	os.Exit(code)
}

// APIServer returns the package's shared API server, starting it on first use. It skips the
// test in -short mode.
func APIServer(t testing.TB) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a kube-apiserver; skipped in -short mode")
	}
	sharedOnce.Do(func() { shared, sharedErr = startCluster(sharedOpts) })
	if sharedErr != nil {
		t.Fatalf("start API server: %v", sharedErr)
	}
	return shared
}

// NewAPIServer starts an API server for this test alone (for tests that change server flags).
func NewAPIServer(t testing.TB, opts servers.APIServerOptions) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a kube-apiserver; skipped in -short mode")
	}
	c, err := startCluster(opts)
	if err != nil {
		t.Fatalf("start API server: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

func startCluster(opts servers.APIServerOptions) (*Cluster, error) {
	a, err := servers.StartAPIServer(opts)
	if err != nil {
		return nil, err
	}
	s := scheme.New()
	c, err := client.New(a.Config, client.Options{Scheme: s})
	if err != nil {
		_ = a.Stop()
		return nil, err
	}
	return &Cluster{APIServer: a, Scheme: s, Client: c}, nil
}

// Namespace creates a namespace with a unique name starting with prefix and the given
// annotations, and deletes it when the test ends.
func (c *Cluster) Namespace(t testing.TB, prefix string, annotations map[string]string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-", Annotations: annotations}}
	if err := c.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), ns) })
	return ns.Name
}

// Redis starts a redis-server for this test.
func Redis(t testing.TB, o servers.RedisOptions) *servers.Process {
	t.Helper()
	requireIntegration(t)
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	p, err := servers.StartRedis(context.Background(), o)
	if err != nil {
		t.Fatalf("start redis: %v", err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	return p
}

// SentinelSet starts a Redis master, replicas and Sentinels for this test.
func SentinelSet(t testing.TB, o servers.SentinelSetOptions) *servers.SentinelSet {
	t.Helper()
	requireIntegration(t)
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	s, err := servers.StartSentinelSet(context.Background(), o)
	if err != nil {
		t.Fatalf("start sentinel set: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// GitRemote starts a git smart-HTTP remote for this test.
func GitRemote(t testing.TB, o servers.GitRemoteOptions) *servers.GitRemote {
	t.Helper()
	requireIntegration(t)
	if o.Root == "" {
		o.Root = t.TempDir()
	}
	r, err := servers.StartGitRemote(context.Background(), o)
	if err != nil {
		t.Fatalf("start git remote: %v", err)
	}
	t.Cleanup(func() { _ = r.Stop() })
	return r
}

// S3 starts an S3 server for this test with the named buckets, made publicly readable when
// publicRead is set.
func S3(t testing.TB, publicRead bool, buckets ...string) *servers.S3Server {
	t.Helper()
	requireIntegration(t)
	s, err := servers.StartS3(context.Background(), servers.S3Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("start S3 server: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	for _, b := range buckets {
		if err := s.CreateBucket(context.Background(), b, publicRead); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// Eventually calls check until it returns nil, failing the test with the last error after timeout.
func Eventually(t testing.TB, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not true after %s: %v", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Name returns a lower-case name derived from the test's name, usable as a Kubernetes name.
func Name(t testing.TB) string {
	n := strings.ToLower(t.Name())
	var b strings.Builder
	for _, r := range n {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	s := strings.Trim(b.String(), "-")
	if len(s) > 40 {
		s = strings.Trim(s[len(s)-40:], "-")
	}
	return s
}

func requireIntegration(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs real servers; skipped in -short mode")
	}
}

// RedisCommands reads the calls per command of the real redis-server at addr; two readings
// and servers.CommandsSince count what a piece of work sent.
func RedisCommands(t testing.TB, addr string) map[string]int64 {
	t.Helper()
	calls, err := servers.CommandCalls(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	return calls
}

// KubeConfigFile writes the cluster's admin kubeconfig into dir, for a process the test starts.
func (c *Cluster) KubeConfigFile(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, c.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Registry starts an OCI registry on loopback for this test.
func Registry(t testing.TB, o servers.RegistryOptions) *servers.Registry {
	t.Helper()
	r, err := servers.StartRegistry(context.Background(), o)
	if err != nil {
		t.Fatalf("start OCI registry: %v", err)
	}
	t.Cleanup(func() { _ = r.Stop() })
	return r
}

// FluxSource runs Flux's source-controller against c for this test (c must serve its CRDs:
// servers.APIServerOptions.ExtraCRDPaths with servers.FluxSourceCRDs()).
func FluxSource(t testing.TB, c *Cluster) *servers.FluxSource {
	t.Helper()
	s, err := servers.StartFluxSource(context.Background(), c.KubeConfig, t.TempDir())
	if err != nil {
		t.Fatalf("start Flux source-controller: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}
