package servers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// CacheDir is where `make test` keeps the servers it builds (kube-apiserver, etcd, versitygw).
func CacheDir() string {
	if d := os.Getenv("SITEOPS_CACHE_DIR"); d != "" {
		return d
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "siteops")
}

// AssetsDir is the folder holding kube-apiserver, etcd and versitygw: KUBEBUILDER_ASSETS when
// set, else the build cache.
func AssetsDir() string {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d
	}
	return filepath.Join(CacheDir(), "bin")
}

// LookBinary finds a server binary in AssetsDir, then on PATH, with advice when it is missing.
func LookBinary(name string) (string, error) {
	p := filepath.Join(AssetsDir(), name)
	if st, err := os.Stat(p); err == nil && !st.IsDir() {
		return p, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s not found in %s or on PATH: run `make test-tools` (builds it) or install it", name, AssetsDir())
}

// loopbackOr fills an unset host with 127.0.0.1 and an unset port with one free on that host.
func loopbackOr(host string, port int) (string, int, error) {
	if host == "" {
		host = "127.0.0.1"
	}
	if port != 0 {
		return host, port, nil
	}
	port, err := FreePort(host)
	return host, port, err
}

// FreePort returns a TCP port on host that was free a moment ago.
func FreePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("find a free port on %s: %w", host, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Process is a server started by this package.
type Process struct {
	// Name says what the process is, for messages.
	Name string
	// Addr is the host:port the process listens on.
	Addr string
	// Dir is the process's working folder (data and log).
	Dir string

	path string
	args []string
	env  []string // added to this process's environment

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Host is the host part of Addr.
func (p *Process) Host() string { h, _, _ := net.SplitHostPort(p.Addr); return h }

// Port is the port part of Addr.
func (p *Process) Port() int {
	_, port, _ := net.SplitHostPort(p.Addr)
	n, _ := strconv.Atoi(port)
	return n
}

// LogPath is the file that holds the process's stdout and stderr.
func (p *Process) LogPath() string { return filepath.Join(p.Dir, p.Name+".log") }

func newProcess(name, addr, dir, path string, args ...string) *Process {
	return &Process{Name: name, Addr: addr, Dir: dir, path: path, args: args}
}

// start runs the process and waits until ready reports nil or the timeout passes.
func (p *Process) start(ctx context.Context, timeout time.Duration, ready func(context.Context) error) error {
	if err := os.MkdirAll(p.Dir, 0o755); err != nil {
		return fmt.Errorf("create %s folder: %w", p.Name, err)
	}
	logFile, err := os.OpenFile(p.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open %s log: %w", p.Name, err)
	}
	cmd := exec.Command(p.path, p.args...)
	cmd.Dir = p.Dir
	if len(p.env) > 0 {
		cmd.Env = append(os.Environ(), p.env...)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Children die with their parent, so an interrupted test or `dev up` leaves nothing behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logFile.Close(); close(done) }()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()

	deadline := time.Now().Add(timeout)
	var lastErr error
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("%s exited during start-up; see %s", p.Name, p.LogPath())
		case <-ctx.Done():
			p.Stop()
			return ctx.Err()
		default:
		}
		attemptCtx, cancel := context.WithTimeout(ctx, time.Second)
		lastErr = ready(attemptCtx)
		cancel()
		if lastErr == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.Stop()
	return fmt.Errorf("%s not ready at %s after %s: %w (log: %s)", p.Name, p.Addr, timeout, lastErr, p.LogPath())
}

// Running reports whether the process has been started and not yet exited.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *Process) signal(sig syscall.Signal, grace time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return nil
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return nil
	case <-time.After(grace):
	}
	_ = cmd.Process.Kill()
	select {
	case <-done:
		return nil
	case <-time.After(5 * time.Second):
		return errors.New(p.Name + " did not exit after SIGKILL")
	}
}

// Stop ends the process (SIGTERM, then SIGKILL after 5s) and waits for it.
func (p *Process) Stop() error { return p.signal(syscall.SIGTERM, 5*time.Second) }

// Kill ends the process at once with SIGKILL, as a crash would.
func (p *Process) Kill() error { return p.signal(syscall.SIGKILL, 0) }

func waitTCP(ctx context.Context, addr string) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

func mkdir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	return nil
}
