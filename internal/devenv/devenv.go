// Package devenv runs siteops locally: a real kube-apiserver and etcd from the build cache with the
// CRDs installed, and the manager in-process against them. `siteops dev up` and `make demo` use it.
package devenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/servers"
)

// ReadyLine starts the one line printed once the environment is usable.
const ReadyLine = "siteops dev: ready"

// Options configures Up.
type Options struct {
	// KubeconfigPath is where the admin kubeconfig is written.
	KubeconfigPath string
	// StateDir holds the servers' data and logs; default: the kubeconfig's folder.
	StateDir string
	// Manager configures the in-process manager; leader election is always off locally.
	Manager manager.Options
	// Out receives progress lines.
	Out io.Writer
}

// Up starts the local environment, reports readiness on Out, and blocks until ctx is done; then
// it stops everything it started.
func Up(ctx context.Context, o Options) (err error) {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.StateDir == "" {
		o.StateDir = filepath.Dir(o.KubeconfigPath)
	}
	if err := os.MkdirAll(o.StateDir, 0o755); err != nil {
		return fmt.Errorf("create state folder: %w", err)
	}
	var stops []func() error
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			err = errors.Join(err, stops[i]())
		}
	}()

	fmt.Fprintln(o.Out, "siteops dev: starting kube-apiserver and etcd")
	api, err := servers.StartAPIServer(servers.APIServerOptions{})
	if err != nil {
		return err
	}
	stops = append(stops, api.Stop)
	if err := os.WriteFile(o.KubeconfigPath, api.KubeConfig, 0o600); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	stops = append(stops, func() error { return ignoreNotExist(os.Remove(o.KubeconfigPath)) })

	mo := o.Manager
	mo.LeaderElect = false
	if mo.MetricsAddr, err = loopbackAddr(); err != nil {
		return err
	}
	if mo.ProbeAddr, err = loopbackAddr(); err != nil {
		return err
	}
	mgr, err := manager.New(api.Config, mo)
	if err != nil {
		return err
	}
	mgrCtx, cancel := context.WithCancel(ctx)
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- mgr.Start(mgrCtx) }()
	stops = append(stops, func() error {
		cancel()
		select {
		case err := <-mgrDone:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("manager did not stop within 30s")
		}
	})
	syncCtx, syncCancel := context.WithTimeout(ctx, time.Minute)
	defer syncCancel()
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		select {
		case err := <-mgrDone:
			return fmt.Errorf("manager stopped during start-up: %w", err)
		default:
			return errors.New("manager caches did not sync within a minute")
		}
	}
	ctrl.Log.WithName("dev").Info("manager running", "controllers", mo.Controllers)
	fmt.Fprintf(o.Out, "%s (kubeconfig: %s)\n", ReadyLine, o.KubeconfigPath)

	select {
	case <-ctx.Done():
		fmt.Fprintln(o.Out, "siteops dev: stopping")
		return nil
	case err := <-mgrDone:
		mgrDone <- err
		return fmt.Errorf("manager stopped: %w", err)
	}
}

func loopbackAddr() (string, error) {
	port, err := servers.FreePort("127.0.0.1")
	if err != nil {
		return "", err
	}
	return "127.0.0.1:" + strconv.Itoa(port), nil
}

func ignoreNotExist(err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
