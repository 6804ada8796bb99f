package gitwriter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"

	"github.com/siteops/siteops/internal/egress"
)

// DefaultTimeout bounds each exchange with the remote (a fetch, a push) when Config.Timeout is 0.
const DefaultTimeout = time.Minute

// ReasonRemoteNotAllowed is the condition reason of a remote the egress policy refuses.
const ReasonRemoteNotAllowed = "RemoteNotAllowed"

// defaultEgress applies when a Config has no policy: https and ssh to public addresses only.
var defaultEgress = egress.MustNew(egress.Config{})

// errorBodyBytes is the most of an error answer's body read (and thrown away) so the connection
// can be reused; nothing of it is ever shown.
const errorBodyBytes = 4096

// RemoteError is a failed exchange with the remote, told in the operator's own words: the
// operation, the URL (without credentials), the HTTP status or network error, and what to check.
// It never carries text the remote sent (error pages, git ERR lines, hook output), which would
// let a tenant read internal services through the mirror. Unwrap gives the kind of failure (an
// *egress.Refused, a go-git transport error such as transport.ErrAuthenticationRequired, or a
// context error), never the original error.
type RemoteError struct {
	msg  string
	kind error
}

func (e *RemoteError) Error() string { return e.msg }

// Unwrap returns the kind of failure.
func (e *RemoteError) Unwrap() error { return e.kind }

// exchange holds what one operation learnt that the libraries in between may lose: a refusal of
// the policy and the HTTP status of an answer that was not a success.
type exchange struct {
	refused atomic.Pointer[egress.Refused]
	status  atomic.Int32
	// received counts the bytes the remote sent, against Config.MaxFetchBytes.
	received *egress.Budget
}

type exchangeKey struct{}

func exchangeFrom(ctx context.Context) *exchange {
	ex, _ := ctx.Value(exchangeKey{}).(*exchange)
	return ex
}

// remote reaches one git URL through the egress policy: HTTP(S) through an HTTP client of its
// own, SSH through a per-operation dialer; go-git's process-wide transports are never used.
type remote struct {
	url     string
	shown   string
	auth    transport.AuthMethod
	policy  *egress.Policy
	timeout time.Duration
	// maxBytes bounds the bytes received in one exchange.
	maxBytes int64
	// pushCaps are the capabilities the last update the remote took asked for, as sent (a few
	// bytes, not a list's maps, for each of a thousand writers); "" until then and after a push
	// that failed. Only the writer's goroutine uses them.
	pushCaps string

	httpOnce   sync.Once
	http       transport.Transport
	httpClient atomic.Pointer[http.Client]
}

func newRemote(cfg Config) *remote {
	p := cfg.Egress
	if p == nil {
		p = defaultEgress
	}
	t := cfg.Timeout
	if t <= 0 {
		t = DefaultTimeout
	}
	n := cfg.MaxFetchBytes
	if n <= 0 {
		n = DefaultMaxFetchBytes
	}
	return &remote{url: cfg.URL, shown: egress.Redact(cfg.URL), auth: cfg.Auth, policy: p, timeout: t, maxBytes: n}
}

// begin starts one operation bounded by the remote's timeout.
func (r *remote) begin(ctx context.Context) (context.Context, *exchange, context.CancelFunc) {
	ex := &exchange{received: egress.NewBudget(r.maxBytes)}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	return context.WithValue(ctx, exchangeKey{}, ex), ex, cancel
}

// endpoint parses the URL and checks its scheme against the policy.
func (r *remote) endpoint() (*transport.Endpoint, error) {
	ep, err := transport.NewEndpoint(r.url)
	if err != nil {
		return nil, &RemoteError{msg: fmt.Sprintf("remote %s is not a git URL; use https://host/org/repo.git or ssh://git@host/org/repo.git", r.shown), kind: err}
	}
	if err := r.policy.CheckScheme(ep.Protocol); err != nil {
		var refused *egress.Refused
		errors.As(err, &refused)
		return nil, &RemoteError{msg: fmt.Sprintf("remote %s: %s", r.shown, err), kind: refused}
	}
	return ep, nil
}

// client returns the transport for ep, routed through the policy, and the release to call when
// the operation's sessions are closed.
func (r *remote) client(ctx context.Context, ex *exchange, ep *transport.Endpoint) (transport.Transport, func(), error) {
	switch ep.Protocol {
	case "http", "https":
		r.httpOnce.Do(func() {
			c := &http.Client{Transport: quietTransport{next: r.policy.Transport()}}
			r.httpClient.Store(c)
			r.http = githttp.NewClient(c)
		})
		return r.http, func() {}, nil
	case "ssh":
		deadline, ok := ctx.Deadline()
		if !ok {
			deadline = time.Now().Add(r.timeout)
		}
		proxyURL, release := r.policy.SSHProxy(egress.SSHRoute{Deadline: deadline, Wrap: ex.received.Conn, Refused: func(rf *egress.Refused) { ex.refused.Store(rf) }})
		ep.Proxy = transport.ProxyOptions{URL: proxyURL}
		return gitssh.DefaultClient, release, nil
	}
	return nil, nil, &RemoteError{msg: fmt.Sprintf("remote %s: URL scheme %q is not supported; use https or ssh", r.shown, ep.Protocol)}
}

// closeIdle closes the idle connections of the remote's HTTP client: a stopped writer keeps no
// sockets, nor their buffers, open until the remote or the idle timeout closes them.
func (r *remote) closeIdle() {
	if c := r.httpClient.Load(); c != nil {
		c.CloseIdleConnections()
	}
}

// uploadPack opens a fetch session; release closes it.
func (r *remote) uploadPack(ctx context.Context, ex *exchange) (transport.UploadPackSession, func(), error) {
	return openSession(ctx, r, ex, func(tr transport.Transport, ep *transport.Endpoint) (transport.UploadPackSession, error) {
		return tr.NewUploadPackSession(ep, r.auth)
	})
}

// receivePack opens a push session; release closes it.
func (r *remote) receivePack(ctx context.Context, ex *exchange) (transport.ReceivePackSession, func(), error) {
	return openSession(ctx, r, ex, func(tr transport.Transport, ep *transport.Endpoint) (transport.ReceivePackSession, error) {
		return tr.NewReceivePackSession(ep, r.auth)
	})
}

// openSession opens a session of r's remote with open, on the writer's own transport; release
// closes the session and the transport.
func openSession[S interface{ Close() error }](ctx context.Context, r *remote, ex *exchange, open func(transport.Transport, *transport.Endpoint) (S, error)) (S, func(), error) {
	var none S
	ep, err := r.endpoint()
	if err != nil {
		return none, nil, err
	}
	tr, release, err := r.client(ctx, ex, ep)
	if err != nil {
		return none, nil, err
	}
	sess, err := open(tr, ep)
	if err != nil {
		release()
		return none, nil, err
	}
	return sess, func() { _ = sess.Close(); release() }, nil
}

// errPushRefused is the kind of a push the remote answered with a refusal of its own (a
// protected branch, a server-side hook).
var errPushRefused = errors.New("the remote refused the update")

// describe turns a failure of operation what into a RemoteError: the policy and the deadline
// first (the libraries in between may wrap them into errors that lose them), then the kind of
// failure with the HTTP status and what to check. Errors that are the writer's own pass through.
func (r *remote) describe(ctx context.Context, ex *exchange, what string, err error) error {
	var own *RemoteError
	if errors.As(err, &own) || errors.Is(err, errRemoteMoved) {
		return err
	}
	// The bounds first: a transfer cut short also fails in other ways on the way up.
	if ex.received.Exceeded() {
		return &RemoteError{msg: fmt.Sprintf("%s: the remote sent more than %d bytes (limit: %s); check the repository's size or raise the limit", what, r.maxBytes, FlagMaxFetchBytes), kind: ErrFetchTooLarge}
	}
	var tooLarge *objectsTooLarge
	if errors.As(err, &tooLarge) {
		return &RemoteError{msg: fmt.Sprintf("%s: the objects sent would take more than %d bytes once inflated (limit: %s); check the repository's size or raise the limit", what, tooLarge.limit, FlagMaxFetchObjectBytes), kind: ErrFetchTooLarge}
	}
	var packLarge *packTooLarge
	if errors.As(err, &packLarge) {
		return &RemoteError{msg: fmt.Sprintf("%s: the remote sent a pack of more than %d bytes (limit: %s); check the repository's size or raise the limit", what, packLarge.limit, FlagMaxFetchBytes), kind: ErrFetchTooLarge}
	}
	var refused *egress.Refused
	if rf := ex.refused.Load(); rf != nil {
		refused = rf
	} else {
		errors.As(err, &refused)
	}
	if refused != nil {
		return &RemoteError{msg: fmt.Sprintf("%s: %s", what, refused), kind: refused}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) || egress.IsTimeout(err) {
		return &RemoteError{msg: fmt.Sprintf("%s: no complete answer within %s; retrying", what, r.timeout), kind: context.DeadlineExceeded}
	}
	code := int(ex.status.Load())
	status := ""
	if code != 0 {
		status = fmt.Sprintf(" (HTTP %d)", code)
	}
	for _, k := range []struct {
		kind error
		hint string
	}{
		{transport.ErrRepositoryNotFound, "repository not found%s; check the GitProvider's spec.url and, for a private repository, its credentials"},
		{transport.ErrAuthenticationRequired, "authentication required%s; check the credentials in the GitProvider's Secret (username/password, bearerToken or identity)"},
		{transport.ErrAuthorizationFailed, "access denied%s; check that the credentials in the GitProvider's Secret may push to the repository"},
		{transport.ErrInvalidAuthMethod, "the GitProvider's Secret does not fit the URL's scheme%s: use username/password or bearerToken with https, identity and known_hosts with ssh"},
		{errPushRefused, "the remote refused the update%s (a protected branch or a server-side hook?); its reasons are in the git host's logs"},
	} {
		if errors.Is(err, k.kind) {
			return &RemoteError{msg: what + ": " + fmt.Sprintf(k.hint, status), kind: k.kind}
		}
	}
	switch {
	case code != 0:
		return &RemoteError{msg: fmt.Sprintf("%s: the remote answered HTTP %d; check the GitProvider's spec.url", what, code)}
	case strings.Contains(err.Error(), "ssh: handshake failed"):
		// The text is the SSH client's own; only the fact is reported.
		return &RemoteError{msg: what + ": SSH handshake failed: the host key is not in known_hosts or the identity was refused; check known_hosts and identity in the GitProvider's Secret"}
	}
	return &RemoteError{msg: fmt.Sprintf("%s: %s; check the GitProvider's spec.url", what, egress.NetDetail(err))}
}

// quietTransport notes the policy's refusals and the status of failed answers in the
// operation's exchange, counts the bytes of successful answers against its bound, and drops the body of every answer that is not a success, so no library
// in between can copy it into an error.
type quietTransport struct{ next http.RoundTripper }

// CloseIdleConnections closes the idle connections of the transport underneath.
func (t quietTransport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (t quietTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ex := exchangeFrom(req.Context())
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		var rf *egress.Refused
		if ex != nil && errors.As(err, &rf) {
			ex.refused.Store(rf)
		}
		return nil, err
	}
	if resp.StatusCode >= 300 {
		if ex != nil && resp.StatusCode >= 400 {
			ex.status.Store(int32(resp.StatusCode))
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, errorBodyBytes))
		_ = resp.Body.Close()
		resp.Body, resp.ContentLength = http.NoBody, 0
		return resp, nil
	}
	if ex != nil && ex.received != nil {
		resp.Body = ex.received.Body(resp.Body)
	}
	return resp, nil
}

// CheckRemote checks what can be known of a remote URL before connecting: its scheme and, when
// its host is an IP address, that address. Host names are checked when connecting, on the
// address they resolve to then. The error names the setting that would allow the remote.
func CheckRemote(p *egress.Policy, rawURL string) error {
	if p == nil {
		p = defaultEgress
	}
	r := &remote{url: rawURL, shown: egress.Redact(rawURL), policy: p}
	ep, err := r.endpoint()
	if err != nil {
		return err
	}
	ip, isIP := parseIP(ep.Host)
	if !isIP {
		// A name: checked on the addresses it resolves to, when connecting.
		return nil
	}
	port := ep.Port
	if port == 0 {
		port = map[string]int{"https": 443, "http": 80, "ssh": 22}[ep.Protocol]
	}
	if err := p.CheckAddr(ep.Host, ip, fmt.Sprint(port)); err != nil {
		var refused *egress.Refused
		errors.As(err, &refused)
		return &RemoteError{msg: fmt.Sprintf("remote %s: %s", r.shown, err), kind: refused}
	}
	return nil
}

func parseIP(host string) (netip.Addr, bool) {
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return ip, err == nil
}
