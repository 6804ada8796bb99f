// Package ghtest serves GitHub's commits API and ZIP archive endpoints from a real local HTTP
// server, for tests of the GitHub source: repositories with branches and commits, private
// repositories that need a token, a GitHub App whose JWTs are verified and whose installation
// tokens are scoped and expire, injected failures, and request counters.
package ghtest

import (
	"archive/zip"
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
)

// Request kinds counted by Server.
const (
	KindResolve = "resolve"
	KindArchive = "archive"
	// KindAppInstallation and KindAppToken are the GitHub App's installation look-ups and
	// installation token requests.
	KindAppInstallation = "app-installation"
	KindAppToken        = "app-token"
)

// Server is a local stand-in for GitHub's API (APIURL) and archive host (ArchiveURL).
type Server struct {
	// APIURL is the base of the commits API (--github-api-url).
	APIURL string
	// ArchiveURL is the base of the ZIP archives (--github-archive-url).
	ArchiveURL string

	srv      *httptest.Server
	mu       sync.Mutex
	repos    map[string]*repo
	counts   map[string]int
	auth     map[string][]string
	failures map[string][]int
	app      *app
}

type repo struct {
	token    string // when set, requests need "token <token>", else 404 like GitHub
	branches map[string]string
	archives map[string][]byte // sha → zip
}

// New starts a server that stops when the test ends.
func New(t testing.TB) *Server {
	s := Start()
	t.Cleanup(s.Close)
	return s
}

// Start starts a server shared by several tests; Close stops it.
func Start() *Server {
	s := &Server{repos: map[string]*repo{}, counts: map[string]int{}, auth: map[string][]string{}, failures: map[string][]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.APIURL = s.srv.URL + "/api"
	s.ArchiveURL = s.srv.URL + "/archive"
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// Private makes org/repo require token.
func (s *Server) Private(org, name, token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.repo(org, name).token = token
}

func (s *Server) repo(org, name string) *repo {
	k := org + "/" + name
	r := s.repos[k]
	if r == nil {
		r = &repo{branches: map[string]string{}, archives: map[string][]byte{}}
		s.repos[k] = r
	}
	return r
}

// Push makes a commit holding files (path → content) the tip of branch and returns its SHA.
func (s *Server) Push(org, name, branch string, files map[string]string) string {
	archive := Zip(name+"-top", files)
	return s.PushArchive(org, name, branch, archive)
}

// PushArchive makes a commit whose archive is exactly raw the tip of branch and returns its SHA.
func (s *Server) PushArchive(org, name, branch string, raw []byte) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repo(org, name)
	sum := sha1.Sum(append([]byte(fmt.Sprintf("%s/%s/%s/%d", org, name, branch, len(r.archives))), raw...))
	sha := hex.EncodeToString(sum[:])
	r.archives[sha] = raw
	r.branches[branch] = sha
	return sha
}

// FailNext makes the next requests of kind answer the given status codes, in order.
// Use FailNextRepo in tests that share one server.
func (s *Server) FailNext(kind string, codes ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures[kind] = append(s.failures[kind], codes...)
}

// FailNextRepo makes the next requests of kind for org/repo answer the given status codes.
func (s *Server) FailNextRepo(org, name, kind string, codes ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := org + "/" + name + ":" + kind
	s.failures[k] = append(s.failures[k], codes...)
}

// Count is how many requests of kind were served (any status).
func (s *Server) Count(kind string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[kind]
}

// CountRepo is how many requests of kind were served for org/repo.
func (s *Server) CountRepo(org, name, kind string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[org+"/"+name+":"+kind]
}

// Authorizations are the Authorization headers received for kind, in order ("" when absent).
func (s *Server) Authorizations(kind string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth[kind]...)
}

// RepoAuthorizations are the Authorization headers received for kind on org/repo.
func (s *Server) RepoAuthorizations(org, name, kind string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth[org+"/"+name+":"+kind]...)
}

func (s *Server) serve(w http.ResponseWriter, req *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	if s.serveApp(w, req, parts) {
		return
	}
	var kind, org, name, ref string
	switch {
	case len(parts) == 6 && parts[0] == "api" && parts[1] == "repos" && parts[4] == "commits":
		kind, org, name, ref = KindResolve, parts[2], parts[3], parts[5]
	case len(parts) == 5 && parts[0] == "archive" && parts[3] == "zip":
		kind, org, name, ref = KindArchive, parts[1], parts[2], parts[4]
	default:
		http.NotFound(w, req)
		return
	}
	s.counts[kind]++
	s.counts[org+"/"+name+":"+kind]++
	s.auth[kind] = append(s.auth[kind], req.Header.Get("Authorization"))
	s.auth[org+"/"+name+":"+kind] = append(s.auth[org+"/"+name+":"+kind], req.Header.Get("Authorization"))
	for _, k := range []string{kind, org + "/" + name + ":" + kind} {
		if f := s.failures[k]; len(f) > 0 {
			s.failures[k] = f[1:]
			http.Error(w, fmt.Sprintf(`{"message":"injected failure %d"}`, f[0]), f[0])
			return
		}
	}
	r := s.repos[org+"/"+name]
	if r == nil || (r.token != "" && req.Header.Get("Authorization") != "token "+r.token && !s.appTokenReads(req.Header.Get("Authorization"), org, name)) {
		http.Error(w, `{"message":"Not Found"}`, http.StatusNotFound)
		return
	}
	sha := ref
	if b, ok := r.branches[ref]; ok {
		sha = b
	}
	raw, ok := r.archives[sha]
	if !ok {
		if kind == KindResolve {
			http.Error(w, `{"message":"No commit found for SHA: `+ref+`"}`, http.StatusUnprocessableEntity)
		} else {
			http.NotFound(w, req)
		}
		return
	}
	if kind == KindResolve {
		etag := `"` + sha + `"`
		w.Header().Set("ETag", etag)
		if req.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		if req.Header.Get("Accept") != "application/vnd.github.sha" {
			http.Error(w, "this test server only speaks application/vnd.github.sha", http.StatusNotAcceptable)
			return
		}
		_, _ = w.Write([]byte(sha))
		return
	}
	w.Header().Set("Content-Type", "application/zip")
	_, _ = w.Write(raw)
}

// Zip builds a ZIP archive with every file under the folder top (as GitHub archives do; "" for
// none), entries in sorted order.
func Zip(top string, files map[string]string) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := n
		if top != "" {
			p = top + "/" + n
		}
		w, err := zw.Create(p)
		if err != nil {
			panic(err)
		}
		if _, err := w.Write([]byte(files[n])); err != nil {
			panic(err)
		}
	}
	if err := zw.Close(); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// ZipBomb builds a small archive whose single block file decompresses to size bytes.
func ZipBomb(top, file string, size int) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, err := zw.Create(top + "/" + file)
	if err != nil {
		panic(err)
	}
	chunk := bytes.Repeat([]byte(" "), 1<<20)
	_, _ = w.Write([]byte(`{"a":"`))
	for left := size; left > 0; left -= len(chunk) {
		if left < len(chunk) {
			chunk = chunk[:left]
		}
		_, _ = w.Write(chunk)
	}
	_, _ = w.Write([]byte(`"}`))
	if err := zw.Close(); err != nil {
		panic(err)
	}
	return buf.Bytes()
}
