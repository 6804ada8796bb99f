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

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/scheme"
	"github.com/siteops/siteops/internal/servers"
)

// ReadyLine starts the one line printed once the environment is usable.
const ReadyLine = "siteops dev: ready"

// Options configures Start.
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

// Env is a running local environment.
type Env struct {
	// Config is an admin REST config for the local API server.
	Config *rest.Config
	// Client is an admin client with the siteops scheme.
	Client client.Client
	// KubeconfigPath is the admin kubeconfig written for other tools.
	KubeconfigPath string
	// StateDir holds the servers' data and logs.
	StateDir string
	// Servers are the local Valkey, Redis, S3 and git servers the parts use.
	Servers *Servers

	api     *servers.APIServer
	stops   []func() error
	mgrDone chan error
}

// AddUser provisions a user of the local API server and returns its REST config, so a change can
// be made by a named person.
func (e *Env) AddUser(u envtest.User) (*rest.Config, error) {
	au, err := e.api.Env.AddUser(u, nil)
	if err != nil {
		return nil, err
	}
	return au.Config(), nil
}

// Up starts the environment, prints ReadyLine on Out, and blocks until ctx is done; then it
// stops everything it started.
func Up(ctx context.Context, o Options) (err error) {
	env, err := Start(ctx, o)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, env.Stop()) }()
	fmt.Fprintf(o.Out, "%s (kubeconfig: %s)\n", ReadyLine, o.KubeconfigPath)
	select {
	case <-ctx.Done():
		fmt.Fprintln(o.Out, "siteops dev: stopping")
		return nil
	case err := <-env.mgrDone:
		env.mgrDone <- err
		return fmt.Errorf("manager stopped: %w", err)
	}
}

// Start brings up the API server and the manager and returns once the manager's caches synced.
// The caller must call Stop.
func Start(ctx context.Context, o Options) (_ *Env, err error) {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.StateDir == "" {
		o.StateDir = filepath.Dir(o.KubeconfigPath)
	}
	if o.StateDir, err = filepath.Abs(o.StateDir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("create state folder: %w", err)
	}
	env := &Env{KubeconfigPath: o.KubeconfigPath, StateDir: o.StateDir, mgrDone: make(chan error, 1)}
	defer func() {
		if err != nil {
			err = errors.Join(err, env.Stop())
		}
	}()

	serversDir, err := os.MkdirTemp(o.StateDir, "servers-")
	if err != nil {
		return nil, fmt.Errorf("create servers folder: %w", err)
	}
	env.onStop(func() error { return os.RemoveAll(serversDir) })
	mo := o.Manager
	apiOpts := servers.APIServerOptions{}
	if mo.Enabled(manager.PartMirror) {
		// The API server posts its audit events to the mirror, which names each commit's author.
		audit, err := auditWebhook(filepath.Join(serversDir, "audit"), &mo)
		if err != nil {
			return nil, err
		}
		apiOpts.Configure = audit.Configure
	}

	fmt.Fprintln(o.Out, "siteops dev: starting kube-apiserver and etcd")
	api, err := servers.StartAPIServer(apiOpts)
	if err != nil {
		return nil, err
	}
	env.onStop(api.Stop)
	env.api = api
	env.Config = api.Config
	if env.Client, err = client.New(api.Config, client.Options{Scheme: scheme.New()}); err != nil {
		return nil, err
	}
	if err := os.WriteFile(o.KubeconfigPath, api.KubeConfig, 0o600); err != nil {
		return nil, fmt.Errorf("write kubeconfig: %w", err)
	}
	env.onStop(func() error { return ignoreNotExist(os.Remove(o.KubeconfigPath)) })

	mo.LeaderElect = false
	if mo.MetricsAddr, err = loopbackAddr(); err != nil {
		return nil, err
	}
	if mo.ProbeAddr, err = loopbackAddr(); err != nil {
		return nil, err
	}
	fmt.Fprintln(o.Out, "siteops dev: starting Valkey with Sentinels, Redis, S3 and a git remote")
	if env.Servers, err = startServers(ctx, env, serversDir, &mo); err != nil {
		return nil, err
	}
	if webhooksWanted(&mo) {
		if err := installWebhooks(ctx, env.Client, o.StateDir, &mo); err != nil {
			return nil, err
		}
	}
	mgr, err := manager.New(api.Config, mo)
	if err != nil {
		return nil, err
	}
	mgrCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() { env.mgrDone <- mgr.Start(mgrCtx) }()
	env.onStop(func() error {
		cancel()
		select {
		case err := <-env.mgrDone:
			return err
		case <-time.After(30 * time.Second):
			return errors.New("manager did not stop within 30s")
		}
	})
	syncCtx, syncCancel := context.WithTimeout(ctx, time.Minute)
	defer syncCancel()
	if !mgr.GetCache().WaitForCacheSync(syncCtx) {
		select {
		case err := <-env.mgrDone:
			env.mgrDone <- err
			return nil, fmt.Errorf("manager stopped during start-up: %w", err)
		default:
			return nil, errors.New("manager caches did not sync within a minute")
		}
	}
	if webhooksWanted(&mo) {
		if err := waitForWebhookServer(ctx, mgr); err != nil {
			return nil, err
		}
	}
	ctrl.Log.WithName("dev").Info("manager running", "controllers", mo.Controllers)
	return env, nil
}

// Stop ends everything Start started, newest first.
func (e *Env) Stop() error {
	var err error
	for i := len(e.stops) - 1; i >= 0; i-- {
		err = errors.Join(err, e.stops[i]())
	}
	e.stops = nil
	return err
}

func (e *Env) onStop(f func() error) { e.stops = append(e.stops, f) }

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
