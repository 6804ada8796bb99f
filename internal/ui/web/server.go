// Package web serves the siteops UI: server-rendered pages of what is live, where, since when
// and who changed it, read from the shared cache and shown to each person only as far as their
// Kubernetes rights go; actions are sent to the API server as that person.
package web

import (
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/mirror/verify"
	"github.com/siteops/siteops/internal/tenant/resync"
	"github.com/siteops/siteops/internal/ui/access"
	"github.com/siteops/siteops/internal/ui/live"
	"github.com/siteops/siteops/internal/waves/diagram"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// Backend is what the pages read from and act through.
type Backend struct {
	// Objects reads siteops' objects from the shared cache (Decofiles without their content).
	Objects client.Reader
	// Access answers whether a person may read or change something.
	Access *access.Authorizer
	// As returns a client that acts as the person: impersonation in the manager, the
	// kubeconfig's identity in `siteops ui`.
	As func(access.Person) (client.Client, error)
	// Hub tells open pages of changes.
	Hub *live.Hub
	// Proofs, when set, tells each Valkey node's last isolation proof (the manager's tenant
	// part, on the elected leader).
	Proofs IsolationProofs
	// Verify, when set, replays an audit log against the mirror's git history (siteops ui
	// --verify-repo --audit-log) for the Mirror page.
	Verify func(ctx context.Context) (*verify.Report, error)
	// Waves, when set, plans the waves of a repository's catalog (siteops ui --waves-repo).
	Waves func(ctx context.Context) (*diagram.Graph, error)
	// Commits, when set, tells the mirror's recent commits per GitTarget (the manager's mirror
	// engine); without it a target's page shows its status only.
	Commits CommitLog
	// Pending, when set, tells the changes the mirror holds but has not pushed yet per GitTarget
	// (the manager's mirror engine); without it a target's page shows their count only.
	Pending PendingLog
}

// IsolationProofs is the tenant part's record of its isolation proofs.
type IsolationProofs interface {
	// Last returns each node's last proof.
	Last() []resync.NodeProof
}

// CommitLog is the mirror's record of the commits it pushed lately.
type CommitLog interface {
	// Recent returns up to limit of the newest commits pushed for GitTarget namespace/name,
	// newest first.
	Recent(namespace, name string, limit int) []Commit
}

// Commit is one commit the mirror pushed.
type Commit struct {
	// Hash of the commit.
	Hash string
	// Author is who made the change, as attribution resolved it.
	Author string
	// Attribution says how the author was found: the commit's Attribution trailer, such as
	// exact_user or exact_serviceaccount (from an audit event), weak, or absent (no audit fact:
	// the committer authored it, or the --unattributed-author).
	Attribution string
	// AuditID is the API server's Audit-ID of the change, when the author was attributed from
	// an audit event ("(+n)" after it counts the commit's other audit events).
	AuditID string
	// Message is the commit message's first line.
	Message string
	// Files is how many files the commit changed.
	Files int
	// Time the commit was pushed.
	Time time.Time
}

// PendingLog is the mirror's view of the changes it received but has not pushed yet.
type PendingLog interface {
	// Pending returns copies of up to limit of the changes of GitTarget namespace/name waiting to
	// be pushed, oldest first.
	Pending(namespace, name string, limit int) []Pending
}

// Pending is one change the mirror received but has not pushed yet.
type Pending struct {
	// Path is the file in the repository (for a sweep, the folder swept).
	Path string
	// Operation is what the commit will do to the file: write, delete, or sweep (remove the files
	// of objects gone from a folder).
	Operation string
	// Resource names the object: "Kind namespace/name" when the kind is known, else its
	// apiVersion/resource/namespace/name reference.
	Resource string
	// Author is whom the commit will name as author, when attribution found someone; empty means
	// the committer.
	Author string
	// Attribution is how the author was found (exact_user, weak, absent, …); empty when the
	// change was not attributed.
	Attribution string
	// Arrived is when the change reached the mirror; zero when not known.
	Arrived time.Time
}

// Options configure the server.
type Options struct {
	// Authenticator tells who sent each request.
	Authenticator access.Authenticator
	// Local, when set, is `siteops ui`'s token session: the first visit trades ?token= for a
	// cookie.
	Local *access.Local
	// Login, when set, serves the sign-in under /auth/ (OIDC): a person who is not signed in
	// and opens a page is sent to /auth/login?next=<page>.
	Login http.Handler
	// SecureCookies marks cookies Secure (the server is behind TLS).
	SecureCookies bool
	// Rate and Burst bound each person's requests per second.
	Rate  rate.Limit
	Burst int
	// Log receives request failures.
	Log *slog.Logger
}

// Default request limits per person.
const (
	DefaultRate  = 20
	DefaultBurst = 60
)

// Server serves the UI.
type Server struct {
	b     Backend
	o     Options
	pages map[string]*template.Template
	mux   *http.ServeMux

	mu       sync.Mutex
	limiters map[string]*limiter
}

type limiter struct {
	*rate.Limiter
	seen time.Time
}

// New builds the server.
func New(b Backend, o Options) (*Server, error) {
	if o.Authenticator == nil {
		return nil, errors.New("the UI needs an authenticator: it serves no one anonymously")
	}
	if o.Rate == 0 {
		o.Rate, o.Burst = DefaultRate, DefaultBurst
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	s := &Server{b: b, o: o, pages: pages, mux: http.NewServeMux(), limiters: map[string]*limiter{}}
	static, _ := fs.Sub(staticFiles, "static")
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", cacheFor(http.FileServerFS(static))))
	s.mux.HandleFunc("GET /{$}", s.person(s.overview))
	s.mux.HandleFunc("GET /mirror", s.person(s.mirror))
	s.mux.HandleFunc("GET /waves", s.person(s.waves))
	s.mux.HandleFunc("GET /namespaces/{ns}", s.person(s.tenant))
	s.mux.HandleFunc("GET /namespaces/{ns}/decofiles/{name}", s.person(s.site))
	s.mux.HandleFunc("GET /namespaces/{ns}/gittargets/{name}", s.person(s.target))
	s.mux.HandleFunc("POST /namespaces/{ns}/{resource}/{name}/{action}", s.person(s.act))
	s.mux.HandleFunc("GET /live", s.person(s.live))
	if o.Login != nil {
		s.mux.Handle("/auth/", o.Login)
	}
	return s, nil
}

// ServeHTTP applies the headers every response carries and refuses cross-origin writes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	if s.o.SecureCookies {
		h.Set("Strict-Transport-Security", "max-age=31536000")
	}
	csrf.Handler(s.mux).ServeHTTP(w, r)
}

// csrf refuses state-changing requests a browser sent from another origin.
var csrf = http.NewCrossOriginProtection()

// handler is a page handler that knows its person.
type handler func(w http.ResponseWriter, r *http.Request, p access.Person)

// person authenticates and rate-limits a request before its handler runs.
func (s *Server) person(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, err := s.o.Authenticator.Authenticate(r)
		if err != nil && s.o.Login != nil && r.Method == http.MethodGet && r.Header.Get("X-Siteops-Fragment") == "" && r.URL.Path != "/live" {
			http.Redirect(w, r, "/auth/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if err != nil {
			s.fail(w, r, http.StatusUnauthorized, err.Error())
			return
		}
		if !s.allow(p) {
			w.Header().Set("Retry-After", "1")
			s.fail(w, r, http.StatusTooManyRequests, "too many requests: slow down")
			return
		}
		if s.o.Local != nil && r.URL.Query().Get("token") != "" {
			// Trade the token for a cookie and drop it from the address bar and history.
			http.SetCookie(w, s.o.Local.SessionCookie(s.o.SecureCookies))
			u := *r.URL
			q := u.Query()
			q.Del("token")
			u.RawQuery = q.Encode()
			http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
			return
		}
		h(w, r, p)
	}
}

// allow takes one token from p's limiter.
func (s *Server) allow(p access.Person) bool {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.limiters[p.User]
	if !ok {
		if len(s.limiters) > 10000 {
			for k, v := range s.limiters {
				if now.Sub(v.seen) > time.Minute {
					delete(s.limiters, k)
				}
			}
		}
		l = &limiter{Limiter: rate.NewLimiter(s.o.Rate, s.o.Burst)}
		s.limiters[p.User] = l
	}
	l.seen = now
	return l.Allow()
}

// cacheFor lets browsers keep the embedded assets for an hour.
func cacheFor(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "private, max-age=3600")
		h.ServeHTTP(w, r)
	})
}

// Run serves on srv (whose Handler it sets) until ctx is done.
func (s *Server) Run(ctx context.Context, srv *http.Server, serve func() error) error {
	srv.Handler = s
	// Live streams end with ctx, so Shutdown does not wait for them.
	srv.BaseContext = func(net.Listener) context.Context { return ctx }
	errc := make(chan error, 1)
	go func() { errc <- serve() }()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			// A connection a client opened and never sent a request on keeps Shutdown waiting
			// until it is 5 s old; after 5 s, close what is left instead of failing the stop.
			return srv.Close()
		}
		return nil
	}
}
