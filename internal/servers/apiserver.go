package servers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/siteops/siteops/config/crd"
)

// APIServerOptions configures StartAPIServer.
type APIServerOptions struct {
	// ExtraCRDs are installed besides the siteops CRDs (e.g. Knative Service, Flux Kustomization).
	ExtraCRDs []*apiextensionsv1.CustomResourceDefinition
	// ExtraCRDPaths are files or folders of CRD manifests to install too.
	ExtraCRDPaths []string
	// Webhooks are admission webhook configurations to install, served by a local webhook server.
	Webhooks envtest.WebhookInstallOptions
	// Configure may adjust the environment before it starts (API server flags, users).
	Configure func(*envtest.Environment)
	// AuditLogPath, when set, makes the API server also write its audit events to this file
	// (JSON lines, --audit-log-path), synchronously; it needs an audit policy (see
	// AuditWebhook.Configure).
	AuditLogPath string
}

// APIServer is a running kube-apiserver with etcd and the siteops CRDs installed.
type APIServer struct {
	// Env is the controller-runtime test environment behind it.
	Env *envtest.Environment
	// Config is an admin REST config.
	Config *rest.Config
	// KubeConfig is an admin kubeconfig file's content.
	KubeConfig []byte

	// mu serialises Restart, KillAndRestart and Stop.
	mu sync.Mutex
	// certDir is the cert-dir StartAPIServer made (and Stop removes), kept across restarts so
	// that the serving CA clients trust and the service-account signing key stay the same.
	certDir string
}

// StartAPIServer starts etcd and kube-apiserver from AssetsDir and installs the CRDs.
func StartAPIServer(o APIServerOptions) (*APIServer, error) {
	if _, err := LookBinary("kube-apiserver"); err != nil {
		return nil, err
	}
	crds, err := crd.CRDs()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: AssetsDir(),
		CRDInstallOptions: envtest.CRDInstallOptions{
			CRDs:               append(crds, o.ExtraCRDs...),
			Paths:              o.ExtraCRDPaths,
			ErrorIfPathMissing: true,
		},
		WebhookInstallOptions: o.Webhooks,
	}
	// Without it, a stopping API server keeps serving open watches until they time out (a
	// minute and more); with it, it ends them as a rolling update would, and Stop and Restart
	// take a few seconds.
	env.ControlPlane.GetAPIServer().Configure().Set("shutdown-watch-termination-grace-period", "2s")
	// etcd's default 2 GiB is less than the scale benchmarks write into one API server: four sets
	// of 5 000 Decofiles of 50 KB, each stored again with its status.
	env.ControlPlane.Etcd = &envtest.Etcd{}
	env.ControlPlane.Etcd.Configure().Set("quota-backend-bytes", strconv.Itoa(8<<30))
	if o.Configure != nil {
		o.Configure(env)
	}
	api := env.ControlPlane.GetAPIServer()
	var certDir string
	if api.CertDir == "" {
		// envtest deletes a cert-dir it made itself when the API server stops, and makes new
		// certificates at the next start: give it one of ours so that a restart keeps them.
		if certDir, err = os.MkdirTemp("", "siteops-apiserver-"); err != nil {
			return nil, fmt.Errorf("create the API server's certificate folder: %w", err)
		}
		api.CertDir = certDir
	}
	if o.AuditLogPath != "" {
		args := env.ControlPlane.GetAPIServer().Configure()
		args.Set("audit-log-path", o.AuditLogPath)
		args.Set("audit-log-format", "json")
		args.Set("audit-log-mode", "blocking")
	}
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		if certDir != "" {
			_ = os.RemoveAll(certDir)
		}
		return nil, fmt.Errorf("start kube-apiserver and etcd from %s: %w", AssetsDir(), err)
	}
	return &APIServer{Env: env, Config: cfg, KubeConfig: env.KubeConfig, certDir: certDir}, nil
}

// Stop ends the API server and etcd.
func (a *APIServer) Stop() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	err := a.Env.Stop()
	if a.certDir != "" {
		_ = os.RemoveAll(a.certDir)
	}
	return err
}

// Restart is a fault for tests: it stops kube-apiserver (SIGTERM, as a rolling update would)
// and starts it again on the same address with the same flags and certificates, while etcd
// keeps running, so every object survives and Config, KubeConfig and the clients made from them
// work again once it returns. It returns when /readyz answers ok (ctx bounds that wait; the
// process's own start is bounded by the environment's ControlPlaneStartTimeout). Watches end
// with the old process; clients' informers re-list and watch again by themselves. Another
// process could take the port while it is free; on a test machine that has not been seen.
func (a *APIServer) Restart(ctx context.Context) error { return a.restart(ctx, syscall.SIGTERM) }

// KillAndRestart is Restart with SIGKILL: kube-apiserver ends at once, as in a crash, without
// closing its connections or finishing the requests in flight.
func (a *APIServer) KillAndRestart(ctx context.Context) error {
	return a.restart(ctx, syscall.SIGKILL)
}

func (a *APIServer) restart(ctx context.Context, sig syscall.Signal) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	api := a.Env.ControlPlane.GetAPIServer()
	if sig == syscall.SIGKILL {
		pid, err := apiServerPID(api.Port)
		if err != nil {
			return err
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return fmt.Errorf("kill kube-apiserver (pid %d): %w", pid, err)
		}
	}
	// After SIGKILL this only reaps the process.
	if err := api.Stop(); err != nil {
		return fmt.Errorf("stop kube-apiserver: %w", err)
	}
	if err := api.Start(); err != nil {
		return fmt.Errorf("start kube-apiserver again on %s: %w", api.HostPort(), err)
	}
	return a.waitReady(ctx)
}

// waitReady polls /readyz with the admin config until it answers ok.
func (a *APIServer) waitReady(ctx context.Context) error {
	hc, err := rest.HTTPClientFor(a.Config)
	if err != nil {
		return fmt.Errorf("client for the API server's /readyz: %w", err)
	}
	defer hc.CloseIdleConnections()
	var last error
	for {
		attempt, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = getOK(attempt, hc, strings.TrimSuffix(a.Config.Host, "/")+"/readyz")
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver not ready after restart: %w (last: %w)", ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func getOK(ctx context.Context, hc *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// apiServerPID finds the kube-apiserver this process started with --secure-port=port.
func apiServerPID(port string) (int, error) {
	want := []byte("--secure-port=" + port)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("find kube-apiserver's process: %w", err)
	}
	ppid := []byte("\nPPid:\t" + strconv.Itoa(os.Getpid()) + "\n")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil || !bytes.Contains(status, ppid) {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := bytes.Split(cmdline, []byte{0})
		if filepath.Base(string(args[0])) == "kube-apiserver" && slices.ContainsFunc(args[1:], func(a []byte) bool { return bytes.Equal(a, want) }) {
			return pid, nil
		}
	}
	return 0, errors.New("find kube-apiserver's process: no child of this process is kube-apiserver --secure-port=" + port)
}
