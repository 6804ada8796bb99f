package source

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/siteops/siteops/internal/egress"
)

// DefaultTimeout bounds every retrieval (resolving a ref, downloading content) when none is set.
const DefaultTimeout = 60 * time.Second

// Flag names the messages point to, so a refused or bounded retrieval says what to change.
const (
	flagTimeout        = "--source-timeout"
	flagArchiveBytes   = "--decofile-max-archive-bytes"
	flagAllowedHosts   = "--source-allowed-hosts"
	flagAllowPrivate   = "--source-allow-private-networks"
	flagAllowedSchemes = "--source-allowed-schemes"
)

// EgressSettings name the flags of the source URL policy, for the messages of refusals.
var EgressSettings = egress.Settings{Hosts: flagAllowedHosts, Private: flagAllowPrivate, Schemes: flagAllowedSchemes}

// defaultEgress is the policy used when a source has none: https and ssh to public addresses.
var defaultEgress = egress.MustNew(egress.Config{Settings: EgressSettings})

// errorBodyBytes is the most of an error answer's body read (and thrown away) so the connection
// can be reused; nothing of it is ever shown.
const errorBodyBytes = 4096

// op is one bounded retrieval: its deadline and the bytes received from the remote so far.
type op struct {
	limit   int64
	timeout time.Duration
	budget  *egress.Budget // the bytes received, against limit
	refused atomic.Pointer[egress.Refused]
	status  atomic.Int32 // the last HTTP status of an answer that was not a success
}

type opKey struct{}

// begin starts an operation bounded by timeout and limit (bytes received from the remote).
func begin(ctx context.Context, timeout time.Duration, limit int64) (context.Context, *op, context.CancelFunc) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	o := &op{limit: limit, timeout: timeout, budget: egress.NewBudget(limit)}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	return context.WithValue(ctx, opKey{}, o), o, cancel
}

func opFrom(ctx context.Context) *op {
	o, _ := ctx.Value(opKey{}).(*op)
	return o
}

func (o *op) noteRefused(err error) {
	var r *egress.Refused
	if errors.As(err, &r) {
		o.refused.Store(r)
	}
}

// classify turns a failure of the operation into the error to report when its cause is one of
// the operation's own bounds (byte limit, deadline) or the URL policy; it returns nil otherwise.
// These checks come first because the libraries in between may wrap the cause in errors that
// lose it.
func (o *op) classify(ctx context.Context, what string, err error) error {
	switch {
	case o.budget.Exceeded():
		return errorf(ReasonLimitExceeded, false, "%s: the remote sent more than %d bytes (limit: archive bytes, %s)", what, o.limit, flagArchiveBytes)
	case o.refused.Load() != nil:
		return errorf(ReasonNotAllowed, false, "%s: %w", what, o.refused.Load())
	case egress.IsRefused(err):
		var r *egress.Refused
		errors.As(err, &r)
		return errorf(ReasonNotAllowed, false, "%s: %w", what, r)
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) || egress.IsTimeout(err):
		return errorf(ReasonUnavailable, true, "%s: no complete answer within %s (%s); retrying", what, o.timeout, flagTimeout)
	}
	return nil
}

// sourceTransport is the HTTP transport of the sources: it dials through the URL policy, counts
// the bytes of every answer against the operation's limit, and drops the body of every answer
// that is not a success, so no library in between can copy it into an error.
type sourceTransport struct{ next http.RoundTripper }

func newTransport(p *egress.Policy) http.RoundTripper {
	if p == nil {
		p = defaultEgress
	}
	return sourceTransport{next: p.Transport()}
}

func (t sourceTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	o := opFrom(req.Context())
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		if o != nil {
			o.noteRefused(err)
		}
		return nil, err
	}
	if resp.StatusCode >= 300 {
		if o != nil && resp.StatusCode >= 400 {
			o.status.Store(int32(resp.StatusCode))
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, errorBodyBytes))
		_ = resp.Body.Close()
		resp.Body, resp.ContentLength = http.NoBody, 0
		return resp, nil
	}
	if o != nil {
		resp.Body = o.budget.Body(resp.Body)
	}
	return resp, nil
}

// sshRoute routes one SSH operation's connections through the URL policy (see
// egress.Policy.SSHProxy): they count the bytes received against the operation's limit and end
// at its deadline. It returns the proxy URL for go-git's endpoint and its release.
func sshRoute(ctx context.Context, p *egress.Policy, o *op) (string, func()) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(o.timeout)
	}
	if p == nil {
		p = defaultEgress
	}
	return p.SSHProxy(egress.SSHRoute{
		Deadline: deadline,
		Wrap:     o.budget.Conn,
		Refused:  func(r *egress.Refused) { o.refused.Store(r) },
	})
}

// Begin starts a retrieval bounded by timeout (0: DefaultTimeout) and limit (bytes received
// from the remote): requests made with the returned context through NewTransport count against
// it, and Failure explains how it ended.
func Begin(ctx context.Context, timeout time.Duration, limit int64) (context.Context, context.CancelFunc) {
	ctx, _, cancel := begin(ctx, timeout, limit)
	return ctx, cancel
}

// NewTransport is the HTTP transport of a source kind that talks HTTP itself: it dials through
// the URL policy p (nil: https to public addresses), counts the bytes of every answer against
// the retrieval's limit, and drops the body of every answer that is not a success, so no
// library in between can copy it into an error.
func NewTransport(p *egress.Policy) http.RoundTripper { return newTransport(p) }

// Failure is the error of a retrieval begun with Begin that failed with err while doing what:
// a bound of the retrieval or the URL policy when one of them ended it, else the HTTP status
// code of the failed answer (0: the last one the transport saw; 401 and 403: Unauthorized, 404:
// NotFound), else a transient outage. It never carries what the remote sent.
func Failure(ctx context.Context, what string, code int, err error) error {
	o := opFrom(ctx)
	if o == nil {
		return errorf(ReasonUnavailable, true, "%s: %w", what, err)
	}
	if e := o.classify(ctx, what, err); e != nil {
		return e
	}
	if code == 0 {
		code = int(o.status.Load())
	}
	switch {
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return errorf(ReasonUnauthorized, false, "%s: the remote refused the credentials (HTTP %d); check the Secret the Decofile names", what, code)
	case code == http.StatusNotFound:
		return errorf(ReasonNotFound, false, "%s: not found (HTTP 404); check the URL and reference", what)
	case code == http.StatusTooManyRequests || code >= 500:
		return errorf(ReasonUnavailable, true, "%s: the remote answered HTTP %d; retrying", what, code)
	case code >= 400:
		return errorf(ReasonInvalidContent, false, "%s: the remote answered HTTP %d", what, code)
	}
	return errorf(ReasonUnavailable, true, "%s: %w; retrying", what, err)
}

// ReadFailure is the error of reading a downloaded archive, in a retrieval begun with Begin, that
// failed with err while doing what: a bound of the retrieval or the URL policy when one of them
// cut the read short, else err itself when it says what is wrong (a *Error), else an invalid
// archive.
func ReadFailure(ctx context.Context, what string, err error) error {
	if o := opFrom(ctx); o != nil {
		if e := o.classify(ctx, what, err); e != nil {
			return e
		}
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return errorf(ReasonInvalidArchive, false, "%s: %w", what, err)
}
