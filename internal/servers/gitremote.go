package servers

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
)

// GitRemoteOptions configures a git smart-HTTP remote.
type GitRemoteOptions struct {
	// Root holds the bare repositories. Required.
	Root string
	// Host to bind; default 127.0.0.1.
	Host string
	// Username and Password, when set, are required as HTTP basic auth on every request.
	Username, Password string
	// PushEventURL, when set, receives a push event after every push to a repository made by
	// CreateRepo, in the form Gitea and Forgejo send (X-Gitea-Event: push, signed with
	// PushEventSecret in X-Gitea-Signature), as a hosted git server's webhook would.
	PushEventURL    string
	PushEventSecret []byte
}

// GitRemote serves the bare repositories under Root with `git http-backend`, for clone, fetch
// and push over HTTP, like a hosted git server.
type GitRemote struct {
	// Root holds the bare repositories.
	Root string
	// BaseURL is http://host:port; a repository is at BaseURL/<name>.git.
	BaseURL string

	server *http.Server
	events pushEvents
	fault  atomic.Pointer[GitFault]
	conns  atomic.Int64
}

// OpenConnections is how many client connections the remote holds open now, idle ones
// included.
func (r *GitRemote) OpenConnections() int64 { return r.conns.Load() }

// countConns tracks OpenConnections.
func (r *GitRemote) countConns(_ net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew:
		r.conns.Add(1)
	case http.StateClosed, http.StateHijacked:
		r.conns.Add(-1)
	}
}

// GitFault is how the remote misbehaves, for tests of what its clients do when a git host
// fails.
type GitFault struct {
	// Refuse answers every request 503 Service Unavailable.
	Refuse bool
	// Delay holds every request this long before serving (or refusing) it.
	Delay time.Duration
}

// SetFault makes the remote misbehave as f says from now on; nil serves normally again.
func (r *GitRemote) SetFault(f *GitFault) { r.fault.Store(f) }

// faults applies the fault set by SetFault to every request.
func (r *GitRemote) faults(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		f := r.fault.Load()
		if f == nil {
			next.ServeHTTP(w, req)
			return
		}
		if f.Delay > 0 {
			select {
			case <-time.After(f.Delay):
			case <-req.Context().Done():
				return
			}
		}
		if f.Refuse {
			http.Error(w, "the remote is refusing requests", http.StatusServiceUnavailable)
			return
		}
		next.ServeHTTP(w, req)
	})
}

// StartGitRemote starts the remote on a free port.
func StartGitRemote(ctx context.Context, o GitRemoteOptions) (*GitRemote, error) {
	gitBin, err := exec.LookPath("git")
	if err != nil {
		return nil, fmt.Errorf("git not found on PATH: install Debian's git package: %w", err)
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if err := os.MkdirAll(o.Root, 0o755); err != nil {
		return nil, fmt.Errorf("create git remote root: %w", err)
	}
	// git-http-backend itself, not `git http-backend`, which is one process more per request.
	execPath, err := exec.Command(gitBin, "--exec-path").Output()
	if err != nil {
		return nil, fmt.Errorf("find git's programs (git --exec-path): %w", err)
	}
	backend := &cgi.Handler{
		Path: filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + o.Root, "GIT_HTTP_EXPORT_ALL=1", "REMOTE_USER=siteops"},
	}
	r := &GitRemote{Root: o.Root, events: pushEvents{url: o.PushEventURL, secret: o.PushEventSecret}}
	handler := r.announcePushes(sizedBodies(backend))
	if o.Username != "" || o.Password != "" {
		handler = basicAuth(o.Username, o.Password, handler)
	}
	handler = r.faults(handler)
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", net.JoinHostPort(o.Host, "0"))
	if err != nil {
		return nil, fmt.Errorf("listen for git remote: %w", err)
	}
	r.BaseURL = "http://" + l.Addr().String()
	r.server = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ConnState: r.countConns}
	go func() { _ = r.server.Serve(l) }()
	return r, nil
}

// maxPushBytes bounds a request body whose size the client did not announce.
const maxPushBytes = 1 << 30

// sizedBodies spools a chunked request body to a temporary file and hands it on with its
// length: git sends a push above http.postBuffer (1 MiB) chunked, and CGI, so git
// http-backend, takes only bodies of a known length.
func sizedBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.ContentLength >= 0 {
			next.ServeHTTP(w, req)
			return
		}
		f, err := os.CreateTemp("", "git-request-*")
		if err != nil {
			http.Error(w, "cannot spool the request body", http.StatusInternalServerError)
			return
		}
		defer func() { _ = f.Close(); _ = os.Remove(f.Name()) }()
		n, err := io.Copy(f, io.LimitReader(req.Body, maxPushBytes+1))
		switch {
		case err != nil:
			http.Error(w, "cannot read the request body", http.StatusBadRequest)
			return
		case n > maxPushBytes:
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
			return
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			http.Error(w, "cannot spool the request body", http.StatusInternalServerError)
			return
		}
		req.Body, req.ContentLength, req.TransferEncoding = f, n, nil
		next.ServeHTTP(w, req)
	})
}

func basicAuth(user, pass string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		u, p, ok := req.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(user)) != 1 || subtle.ConstantTimeCompare([]byte(p), []byte(pass)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, req)
	})
}

// CreateRepo makes an empty bare repository <name>.git whose default branch is branch, accepting
// pushes over HTTP, and returns its URL.
func (r *GitRemote) CreateRepo(name, branch string) (string, error) {
	if branch == "" {
		branch = "main"
	}
	dir := r.RepoDir(name)
	if err := runGit("", "init", "--bare", "--quiet", "--initial-branch="+branch, dir); err != nil {
		return "", err
	}
	if err := runGit(dir, "config", "http.receivepack", "true"); err != nil {
		return "", err
	}
	// A git host schedules its repositories' maintenance apart from the pushes it serves; git's
	// own default starts it after every push, a process more for each.
	if err := runGit(dir, "config", "receive.autogc", "false"); err != nil {
		return "", err
	}
	if url, _ := r.events.target(); url != "" {
		if err := installPushHook(dir); err != nil {
			return "", err
		}
	}
	return r.RepoURL(name), nil
}

// RepoDir is the bare repository folder of name.
func (r *GitRemote) RepoDir(name string) string { return filepath.Join(r.Root, name+".git") }

// RepoURL is the clone URL of name.
func (r *GitRemote) RepoURL(name string) string { return r.BaseURL + "/" + name + ".git" }

// Stop closes the HTTP server.
func (r *GitRemote) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.server.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func runGit(dir string, args ...string) error {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
