// Package devenv runs siteops locally: a real kube-apiserver and etcd from the build cache with the
// CRDs installed, the servers the parts talk to, optionally a real node (kubelet, containerd) with
// the project's images, and the manager in-process against them. `siteops dev up` and `make demo`
// use it.
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
	"github.com/siteops/siteops/internal/node"
	"github.com/siteops/siteops/internal/scheme"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/tenantroles"
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
	// Stream, when set, receives every component's log lines as they are written, prefixed with
	// the component's name (`dev up -v`); the manager's own logger is the caller's to set.
	Stream io.Writer
	// Node starts a real node joined to the API server, with the image archives of ImagesDir
	// imported; the servers pods need then listen on the node's address (see docs/development.md).
	Node bool
	// ImagesDir holds the image archives for the node (default DefaultImagesDir).
	ImagesDir string
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
	// Node is the real node, when Options.Node asked for one; nil otherwise.
	Node *node.Node
	// Images are the image archives imported into Node, by archive name (SiteImage, ...).
	Images map[string]Image

	api      *servers.APIServer
	logDir   string
	logs     []logFile
	manager  manager.Options
	stops    []func() error
	mgrDone  chan error
	follower *follower
	// uiURL is the web UI's address once StartUI served it.
	uiURL string
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
	fmt.Fprintln(o.Out, "siteops dev: serving the web UI as the admin (for a tenant's view: siteops dev tenant add NAME, then siteops ui --kubeconfig with the kubeconfig it writes)")
	if _, err := env.StartUI(ctx); err != nil {
		return err
	}
	fmt.Fprintln(o.Out)
	if err := env.WriteTable(o.Out); err != nil {
		return err
	}
	fmt.Fprintf(o.Out, "\n%s (kubeconfig: %s)\n", ReadyLine, o.KubeconfigPath)
	var nodeDone <-chan struct{} // nil without a node: never ready
	if env.Node != nil {
		nodeDone = env.Node.Done()
	}
	select {
	case <-ctx.Done():
		fmt.Fprintln(o.Out, "siteops dev: stopping")
		return nil
	case err := <-env.mgrDone:
		env.mgrDone <- err
		return fmt.Errorf("manager stopped: %w", err)
	case <-nodeDone:
		return fmt.Errorf("the node stopped: see %s, %s and %s", filepath.Join(env.Node.Dir, "node.log"), env.Node.ContainerdLog(), env.Node.KubeletLog())
	}
}

// ManagerStopped reports whether the manager has stopped, and with which error, without waiting.
func (e *Env) ManagerStopped() (stopped bool, err error) {
	select {
	case err := <-e.mgrDone:
		e.mgrDone <- err
		return true, err
	default:
		return false, nil
	}
}

// Start brings up the API server, the node (when asked), the servers and the manager, and
// returns once the manager's caches synced. The caller must call Stop.
func Start(ctx context.Context, o Options) (_ *Env, err error) {
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.ImagesDir == "" {
		o.ImagesDir = DefaultImagesDir
	}
	if o.StateDir, err = stateDir(o); err != nil {
		return nil, err
	}
	var images map[string]Image
	if o.Node {
		// Before anything starts: say at once what is missing.
		if err := CheckNode(o.ImagesDir); err != nil {
			return nil, fmt.Errorf("--node: %w", err)
		}
		if images, err = ImageArchives(o.ImagesDir); err != nil {
			return nil, err
		}
	}
	logDir, err := LogDir(o)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("create log folder: %w", err)
	}
	env := &Env{KubeconfigPath: o.KubeconfigPath, StateDir: o.StateDir, logDir: logDir, mgrDone: make(chan error, 1)}
	if o.Stream != nil {
		env.follower = newFollower(o.Stream)
		env.onStop(env.follower.stop)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, env.Stop())
		}
	}()

	// Each run starts from empty servers; the last run's folder stays until then, for its logs.
	serversDir := filepath.Join(o.StateDir, "servers")
	if err := os.RemoveAll(serversDir); err != nil {
		return nil, fmt.Errorf("remove the last run's servers folder: %w", err)
	}
	mo := o.Manager
	var configure []func(*envtest.Environment)
	if mo.Enabled(manager.PartMirror) {
		// The API server posts its audit events to the mirror, which names each commit's author.
		audit, err := auditWebhook(filepath.Join(serversDir, "audit"), &mo)
		if err != nil {
			return nil, err
		}
		configure = append(configure, audit.Configure)
	}
	if admission, err := commitRequestWebhookClient(filepath.Join(serversDir, "admission"), &mo); err != nil {
		return nil, err
	} else if admission != nil {
		configure = append(configure, admission.Configure)
	}
	var access *node.APIAccess
	if o.Node {
		nodeAPI, a, err := nodeAPIServer(filepath.Join(serversDir, "node-api"))
		if err != nil {
			return nil, err
		}
		configure, access = append(configure, nodeAPI), a
	}
	configure = append(configure, env.controlPlaneLogs)

	fmt.Fprintln(o.Out, "siteops dev: starting kube-apiserver and etcd")
	api, err := servers.StartAPIServer(servers.APIServerOptions{Configure: func(e *envtest.Environment) {
		for _, c := range configure {
			c(e)
		}
	}})
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
	// A tenant bound to edit (`siteops dev tenant add`) may use siteops' kinds only once the
	// tenant roles are aggregated into it, which no controller manager does without a node.
	if err := tenantroles.Install(ctx, api.Config, env.Client); err != nil {
		return nil, fmt.Errorf("install the tenant roles: %w", err)
	}

	host := "127.0.0.1"
	if o.Node {
		fmt.Fprintln(o.Out, "siteops dev: starting a node (kubelet, containerd, kube-scheduler, kube-controller-manager) with the images of "+o.ImagesDir)
		if err := startNode(ctx, env, o.StateDir, access, images); err != nil {
			return nil, err
		}
		// Pods reach the machine only at its end of the node's veth pair: the servers they
		// use listen there (the manager, on the machine, reaches that address too).
		host = env.Node.IP
	}

	mo.LeaderElect = false
	if mo.MetricsAddr, err = loopbackAddr(); err != nil {
		return nil, err
	}
	if mo.ProbeAddr, err = loopbackAddr(); err != nil {
		return nil, err
	}
	fmt.Fprintln(o.Out, "siteops dev: starting Valkey with Sentinels, Redis, S3, a git remote and an OCI registry on "+host)
	if env.Servers, err = startServers(ctx, env, serversDir, host, &mo); err != nil {
		return nil, err
	}
	if webhooksWanted(&mo) {
		if err := installWebhooks(ctx, env.Client, o.StateDir, &mo); err != nil {
			return nil, err
		}
	}
	fmt.Fprintln(o.Out, "siteops dev: starting the manager")
	mgr, err := manager.New(api.Config, mo)
	if err != nil {
		return nil, err
	}
	env.manager = mo
	env.addLog("manager", filepath.Join(logDir, ManagerLogName))
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

// stateDir is o's state folder as an absolute path, created.
func stateDir(o Options) (string, error) {
	dir := o.StateDir
	if dir == "" {
		dir = filepath.Dir(o.KubeconfigPath)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create state folder: %w", err)
	}
	return dir, nil
}

// controlPlaneLogs sends etcd's and kube-apiserver's output to files in the log folder, which
// envtest would otherwise discard.
func (e *Env) controlPlaneLogs(env *envtest.Environment) {
	if env.ControlPlane.Etcd == nil {
		env.ControlPlane.Etcd = &envtest.Etcd{}
	}
	api := env.ControlPlane.GetAPIServer()
	for name, set := range map[string]func(io.Writer){
		"etcd":           func(w io.Writer) { env.ControlPlane.Etcd.Out, env.ControlPlane.Etcd.Err = w, w },
		"kube-apiserver": func(w io.Writer) { api.Out, api.Err = w, w },
	} {
		path := filepath.Join(e.logDir, name+".log")
		f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
		if err != nil {
			continue // the process's output is discarded, as envtest does by default
		}
		set(f)
		e.onStop(f.Close)
		e.addLog(name, path)
	}
}

// addLog records a component's log file, and streams it when Options.Stream asks to.
func (e *Env) addLog(name, path string) {
	e.logs = append(e.logs, logFile{name: name, path: path})
	if e.follower != nil && name != "manager" {
		e.follower.follow(name, path)
	}
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
