package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/siteops/siteops/internal/servers"
)

// Controllers are kube-scheduler and kube-controller-manager for a test or development API
// server, so Deployments get Pods, Pods get a node and deleted namespaces get emptied.
// They only talk to the API server: they run as plain processes on the machine, serving nothing.
type Controllers struct {
	// Dir holds their kubeconfig and logs (kube-scheduler.log, kube-controller-manager.log).
	Dir string

	procs []*exec.Cmd
	done  []chan struct{}
}

// StartControllers starts kube-scheduler and kube-controller-manager from binDir (default
// servers.AssetsDir()) against the API server kubeconfig points to. They die with the process
// that started them.
func StartControllers(ctx context.Context, kubeconfig []byte, dir, binDir string) (*Controllers, error) {
	if binDir == "" {
		binDir = servers.AssetsDir()
	}
	for _, b := range []string{"kube-scheduler", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			return nil, fmt.Errorf("%s not found in %s: run `make node-tools`", b, binDir)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	c := &Controllers{Dir: dir}
	common := []string{"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--leader-elect=false", "--secure-port=0", "--v=1"}
	if err := c.start(filepath.Join(binDir, "kube-scheduler"), common...); err != nil {
		return nil, err
	}
	// The token controller needs the API server's signing key, and the ServiceAccount admission
	// plugin that would ask for tokens is off in envtest; every other default controller runs.
	if err := c.start(filepath.Join(binDir, "kube-controller-manager"), append(common,
		"--controllers=*,-serviceaccount-token", "--use-service-account-credentials=false",
		"--node-monitor-grace-period=20s", "--concurrent-gc-syncs=2")...); err != nil {
		_ = c.Stop()
		return nil, err
	}
	// Both exit at once on a bad flag or an unreachable API server: give them a moment to do so.
	select {
	case <-time.After(500 * time.Millisecond):
	case <-ctx.Done():
		_ = c.Stop()
		return nil, ctx.Err()
	}
	for i, d := range c.done {
		select {
		case <-d:
			_ = c.Stop()
			return nil, fmt.Errorf("%s exited at start: see %s", filepath.Base(c.procs[i].Path), c.procs[i].Stdout.(*os.File).Name())
		default:
		}
	}
	return c, nil
}

func (c *Controllers) start(bin string, args ...string) error {
	log, err := os.OpenFile(filepath.Join(c.Dir, filepath.Base(bin)+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %w", filepath.Base(bin), err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(done) }()
	c.procs, c.done = append(c.procs, cmd), append(c.done, done)
	return nil
}

// Stop ends both and waits for them.
func (c *Controllers) Stop() error {
	var errs []error
	for i, p := range c.procs {
		_ = p.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done[i]:
		case <-time.After(5 * time.Second):
			_ = p.Process.Kill()
			select {
			case <-c.done[i]:
			case <-time.After(5 * time.Second):
				errs = append(errs, fmt.Errorf("%s did not exit", filepath.Base(p.Path)))
			}
		}
	}
	return errors.Join(errs...)
}
