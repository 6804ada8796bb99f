package source

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/siteops/siteops/internal/egress"
)

// Default GitHub endpoints; GitHub Enterprise and tests configure their own.
const (
	DefaultGitHubAPIURL     = "https://api.github.com"
	DefaultGitHubArchiveURL = "https://codeload.github.com"
)

var shaPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)

// IsCommitSHA reports whether ref is a full commit SHA (never re-resolved, never polled).
func IsCommitSHA(ref string) bool { return shaPattern.MatchString(strings.ToLower(ref)) }

// GitHub fetches Decofile content from GitHub repositories.
type GitHub struct {
	// APIURL is the REST API base (commits API); default DefaultGitHubAPIURL.
	APIURL string
	// ArchiveURL serves <org>/<repo>/zip/<sha>; default DefaultGitHubArchiveURL.
	ArchiveURL string
	// Limits bound the archive and its content.
	Limits Limits
	// Egress decides which URLs and destinations may be reached, redirects included; nil means
	// https to public addresses only. The base URLs are the platform's, but a redirect is not.
	Egress *egress.Policy
	// Timeout bounds each Resolve and each Fetch; 0 means DefaultTimeout.
	Timeout time.Duration
	// TempDir holds downloaded archives while they are read; "" means the OS default.
	TempDir string
	// Observe, when set, is told about every request: kind (resolve or archive) and status code
	// (0 for a transport error).
	Observe func(kind string, code int)

	// Gate bounds the requests in flight per repository: a repository whose archive is slow to
	// come holds at most Gate.PerRemote workers. nil means a Gate of its own with the defaults.
	Gate *Gate

	mu    sync.Mutex
	etags map[string]etagEntry // "org/repo@ref|token-hash" → last answer

	ownGate Gate   // used when Gate is nil
	share   shared // commits fetched recently, for the other Decofiles following them

	once sync.Once
	http *http.Client
}

type etagEntry struct{ etag, sha string }

// acquire takes a slot of org/repo in the Gate. GitHub is keyed per repository, not per host:
// the host is the platform's (every Decofile of a github source uses it), and what is slow to
// serve is one repository's archive.
func (g *GitHub) acquire(ctx context.Context, org, repo string) (func(), error) {
	return orOwn(g.Gate, &g.ownGate).acquire(ctx, "github", "github/"+strings.ToLower(org+"/"+repo), "GitHub repository "+org+"/"+repo)
}

// maxETags bounds the ETag cache (one entry per repository, ref and token in use).
const maxETags = 10_000

func (g *GitHub) client() *http.Client {
	g.once.Do(func() { g.http = &http.Client{Transport: newTransport(g.Egress)} })
	return g.http
}

func (g *GitHub) observe(kind string, code int) {
	if g.Observe != nil {
		g.Observe(kind, code)
	}
}

func base(u, def string) string {
	if u == "" {
		u = def
	}
	return strings.TrimRight(u, "/")
}

// Resolve returns the commit SHA of ref (a SHA, branch or tag) in org/repo. It uses conditional
// requests: an unchanged ref costs a 304 that GitHub does not count against the rate limit.
func (g *GitHub) Resolve(ctx context.Context, org, repo, ref, token string) (string, error) {
	if IsCommitSHA(ref) {
		return strings.ToLower(ref), nil
	}
	ctx, o, cancel := begin(ctx, g.Timeout, g.Limits.WithDefaults().ArchiveBytes)
	defer cancel()
	release, err := g.acquire(ctx, org, repo)
	if err != nil {
		return "", err
	}
	defer release()
	u := fmt.Sprintf("%s/repos/%s/%s/commits/%s", base(g.APIURL, DefaultGitHubAPIURL), url.PathEscape(org), url.PathEscape(repo), url.PathEscape(ref))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", errorf(ReasonInvalidContent, false, "build commits request: %w", err)
	}
	req.Header.Set("Accept", "application/vnd.github.sha")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	if token != "" {
		req.Header.Set("Authorization", "token "+token)
	}
	key := org + "/" + repo + "@" + ref + "|" + strconv.FormatUint(fnv(token), 16)
	g.mu.Lock()
	cached, hasCached := g.etags[key]
	g.mu.Unlock()
	if hasCached {
		req.Header.Set("If-None-Match", cached.etag)
	}
	resp, err := g.client().Do(req)
	if err != nil {
		g.observe("resolve", 0)
		return "", requestError(ctx, o, fmt.Sprintf("resolve %s/%s@%s", org, repo, ref), "--github-api-url", err)
	}
	defer func() { _ = resp.Body.Close() }()
	g.observe("resolve", resp.StatusCode)
	switch {
	case resp.StatusCode == http.StatusNotModified && hasCached:
		return cached.sha, nil
	case resp.StatusCode == http.StatusOK:
		body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if err != nil {
			return "", requestError(ctx, o, fmt.Sprintf("resolve %s/%s@%s: read the answer", org, repo, ref), "--github-api-url", err)
		}
		sha := strings.ToLower(strings.TrimSpace(string(body)))
		if !IsCommitSHA(sha) {
			return "", errorf(ReasonUnavailable, true, "resolve %s/%s@%s: the commits API did not answer with a commit SHA; check --github-api-url", org, repo, ref)
		}
		if et := resp.Header.Get("ETag"); et != "" {
			g.mu.Lock()
			if g.etags == nil || len(g.etags) >= maxETags {
				g.etags = map[string]etagEntry{} // bounded: the next round re-learns with one full answer each
			}
			g.etags[key] = etagEntry{etag: et, sha: sha}
			g.mu.Unlock()
		}
		return sha, nil
	case resp.StatusCode == http.StatusUnprocessableEntity:
		return "", errorf(ReasonNotFound, false, "%s/%s has no branch, tag or commit %q", org, repo, ref)
	default:
		return "", statusError(resp, "resolve", org, repo, ref, token != "")
	}
}

// Fetch downloads the ZIP archive of commit sha and extracts the block files under folder. The
// archive is streamed to a temporary file (never held in memory) and refused past the limit.
// The Decofiles following the same commit and folder with the same token share one download
// (see shared).
func (g *GitHub) Fetch(ctx context.Context, org, repo, sha, folder, token string) (Blocks, error) {
	key := sharedKey(base(g.ArchiveURL, DefaultGitHubArchiveURL)+"/"+org+"/"+repo, sha, folder, token)
	if b, ok := g.share.get("github", key); ok {
		return b, nil
	}
	l := g.Limits.WithDefaults()
	ctx, o, cancel := begin(ctx, g.Timeout, l.ArchiveBytes)
	defer cancel()
	release, err := g.acquire(ctx, org, repo)
	if err != nil {
		return nil, err
	}
	defer release()
	return g.share.fetch("github", key, func() (Blocks, error) { return g.fetch(ctx, o, l, org, repo, sha, folder, token) })
}

func (g *GitHub) fetch(ctx context.Context, o *op, l Limits, org, repo, sha, folder, token string) (Blocks, error) {
	u := fmt.Sprintf("%s/%s/%s/zip/%s", base(g.ArchiveURL, DefaultGitHubArchiveURL), url.PathEscape(org), url.PathEscape(repo), url.PathEscape(sha))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, errorf(ReasonInvalidContent, false, "build archive request: %w", err)
	}
	if token != "" {
		req.Header.Set("Authorization", "token "+token)
	}
	resp, err := g.client().Do(req)
	if err != nil {
		g.observe("archive", 0)
		return nil, requestError(ctx, o, fmt.Sprintf("download archive of %s/%s@%s", org, repo, sha), "--github-archive-url", err)
	}
	defer func() { _ = resp.Body.Close() }()
	g.observe("archive", resp.StatusCode)
	if resp.StatusCode != http.StatusOK {
		return nil, statusError(resp, "download archive of", org, repo, sha, token != "")
	}
	if resp.ContentLength > l.ArchiveBytes {
		return nil, errorf(ReasonLimitExceeded, false, "archive of %s/%s@%s is %d bytes, over the %d-byte limit (limit: archive bytes)", org, repo, sha, resp.ContentLength, l.ArchiveBytes)
	}
	f, err := os.CreateTemp(g.TempDir, "decofile-*.zip")
	if err != nil {
		return nil, errorf(ReasonUnavailable, true, "create temporary file for the archive: %w", err)
	}
	defer func() { _ = f.Close(); _ = os.Remove(f.Name()) }()
	n, err := io.Copy(f, io.LimitReader(resp.Body, l.ArchiveBytes+1))
	if err != nil && !o.budget.Exceeded() {
		return nil, requestError(ctx, o, fmt.Sprintf("download archive of %s/%s@%s", org, repo, sha), "--github-archive-url", err)
	}
	if n > l.ArchiveBytes || o.budget.Exceeded() {
		return nil, errorf(ReasonLimitExceeded, false, "archive of %s/%s@%s is more than %d bytes, over the limit (limit: archive bytes)", org, repo, sha, l.ArchiveBytes)
	}
	return ExtractZip(f, n, folder, ZipOptions{StripTopDir: true}, l)
}

// requestError describes a request that got no answer: the operation's bounds and the URL
// policy first, then the network error (never anything the remote sent).
func requestError(ctx context.Context, o *op, what, setting string, err error) error {
	if e := o.classify(ctx, what, err); e != nil {
		return e
	}
	return errorf(ReasonUnavailable, true, "%s: %s; check %s (retrying)", what, egress.NetDetail(err), setting)
}

// statusError describes an answer that is not a success by its HTTP status and what to check.
// The body was dropped by the transport: it could be anything, for instance an internal service
// a redirect pointed at, and is never shown.
func statusError(resp *http.Response, what, org, repo, ref string, withToken bool) error {
	code := resp.StatusCode
	target := fmt.Sprintf("%s %s/%s@%s", what, org, repo, ref)
	switch {
	case code == http.StatusTooManyRequests || (code == http.StatusForbidden && resp.Header.Get("X-RateLimit-Remaining") == "0"):
		return errorf(ReasonUnavailable, true, "%s: rate limited by GitHub (HTTP %d); retrying", target, code)
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return errorf(ReasonUnauthorized, false, "%s: GitHub refused the token (HTTP %d); check the token in spec.github.secret, or the operator's GITHUB_TOKEN", target, code)
	case code == http.StatusNotFound && !withToken:
		return errorf(ReasonNotFound, false, "%s: not found (HTTP 404) and no token was sent; if the repository is private, set spec.github.secret to a Secret with key \"token\", "+
			"or have the platform team grant this namespace %s/%s for the operator's token (Namespace annotation %s, or --github-token-grants; the org must be in --github-token-orgs)", target, org, repo, AnnotationGitHubRepos)
	case code == http.StatusNotFound:
		return errorf(ReasonNotFound, false, "%s: not found (HTTP 404); check org, repo and commit, and that the token can read the repository", target)
	case code >= 500:
		return errorf(ReasonUnavailable, true, "%s: GitHub answered HTTP %d; retrying", target, code)
	default:
		return errorf(ReasonUnavailable, true, "%s: unexpected HTTP %d; check --github-api-url and --github-archive-url (retrying)", target, code)
	}
}

// fnv hashes the token so the ETag cache is per credential without keeping tokens as keys.
func fnv(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
