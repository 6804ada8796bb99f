// Package notify tells running site pods that their Decofile changed, in parallel and within
// bounds: a fixed number of pods at a time, a timeout per attempt, a few attempts per pod with
// backoff, and a deadline for the whole rollout. It knows nothing about Kubernetes: it gets the
// selected pods and a way to re-read one, and returns what happened to each.
package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// Protocol is how a pod is told about new content.
type Protocol string

// Protocols.
const (
	// ProtocolPush POSTs the whole merged Decofile to the pod (today's Deco runtime).
	ProtocolPush Protocol = "push"
	// ProtocolLongPoll asks the pod to wait until its mounted timestamp.txt reaches the new value.
	ProtocolLongPoll Protocol = "long-poll"
)

// ParseProtocol checks a --reload-protocol value.
func ParseProtocol(s string) (Protocol, error) {
	switch p := Protocol(s); p {
	case ProtocolPush, ProtocolLongPoll:
		return p, nil
	}
	return "", fmt.Errorf("unknown reload protocol %q (want %s or %s)", s, ProtocolPush, ProtocolLongPoll)
}

// Defaults from the seed's notification strategy, except the concurrency: with pods answering in
// 100 ms, 30 at a time cannot confirm 1000 pods in under 3.3 s whatever the bandwidth, while 250
// confirmed them in 1.6 s (p99 of 20 publishes of 4.2 MB, compressed; BenchmarkPublishLatency),
// and the shared body keeps the heap flat as connections grow (BenchmarkRollout).
const (
	DefaultConcurrency      = 250
	DefaultPodTimeout       = 150 * time.Second
	DefaultAttempts         = 2
	DefaultTimeout          = 5 * time.Minute
	DefaultBackoff          = time.Second
	DefaultProgressInterval = time.Second
)

// Config bounds a rollout.
type Config struct {
	// Concurrency is how many pods are notified at the same time.
	Concurrency int
	// PodTimeout bounds one attempt on one pod (long-poll pods may hold the request ~120 s).
	PodTimeout time.Duration
	// Attempts per pod; a pod that is unreachable or answers 5xx is retried after Backoff, doubled each time.
	Attempts int
	// Backoff before the second attempt.
	Backoff time.Duration
	// Timeout bounds the whole rollout; pods not confirmed by then fail.
	Timeout time.Duration
	// ProgressInterval is the least time between two Progress calls.
	ProgressInterval time.Duration
	// Client sends the requests (default: a client with no connection reuse between pods).
	Client *http.Client
	// DisableCompression sends every pod the plain JSON body, whatever it accepts.
	DisableCompression bool
}

func (c Config) withDefaults() Config {
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.PodTimeout <= 0 {
		c.PodTimeout = DefaultPodTimeout
	}
	if c.Attempts <= 0 {
		c.Attempts = DefaultAttempts
	}
	if c.Backoff <= 0 {
		c.Backoff = DefaultBackoff
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = DefaultProgressInterval
	}
	if c.Client == nil {
		c.Client = NewClient()
	}
	// A pod is tenant-run: whatever client is given, a redirect is answered, never followed.
	cl := *c.Client
	cl.CheckRedirect = noRedirects
	c.Client = &cl
	return c
}

// noRedirects makes the client return a 3xx answer as it is: following it would send the reload
// token and the Decofile wherever a tenant's pod points.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// NewClient is an HTTP client fit for notifying many pods once each: no proxy (pod IPs are
// cluster-internal), and no idle connections kept after a rollout.
func NewClient() *http.Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Client{CheckRedirect: noRedirects, Transport: &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return bodyConn{c}, nil
		},
		DisableKeepAlives:     true,
		DisableCompression:    true,
		MaxIdleConns:          0,
		ResponseHeaderTimeout: 0, // long-poll answers late on purpose; the per-attempt context bounds it
	}}
}

// bodyConn lets net/http write a request body held in memory with one Write: the transport
// hands the body over as an io.LimitedReader, which would otherwise go through a fresh 32 KiB
// copy buffer per request, in 32 KiB writes.
type bodyConn struct{ net.Conn }

// ReadFrom writes an in-memory body directly and copies anything else.
func (c bodyConn) ReadFrom(r io.Reader) (int64, error) {
	if lr, ok := r.(*io.LimitedReader); ok {
		if br, ok := lr.R.(*bodyReader); ok && int64(br.Len()) <= lr.N {
			n, err := br.WriteTo(c.Conn)
			lr.N -= n
			return n, err
		}
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}

// Pod is one pod to notify.
type Pod struct {
	// Name of the pod (reported in results).
	Name string
	// IP is the pod IP; empty means the pod cannot be reached and is skipped.
	IP string
	// Port of the reload endpoint.
	Port int32
	// MountPath is where the Decofile ConfigMap is mounted in the pod (long-poll tsFile).
	MountPath string
	// SkipReason, when set, says why the pod is not notified (not running, being deleted, gone).
	SkipReason string
	// Token, when set, is the reload token the pod's own spec carries as a literal value (a pod
	// injected by the published operator, v0.11, before the webhook moved it to the token
	// Secret); it is sent to this pod instead of Rollout.Token.
	Token string
	// UID identifies the pod across rollouts: what its answers said about compressed bodies
	// (Accept-Encoding, 415) is remembered under it. Empty: nothing is remembered.
	UID string
	// AcceptEncoding is the pod's deco.sites/reload-accept-encoding annotation: the compressed
	// codings it accepts without advertising them. What its answers say takes precedence.
	AcceptEncoding string
}

// Refresher re-reads a pod just before it is notified, so the IP and phase are current; it
// returns the pod with SkipReason set when it is no longer a target.
type Refresher func(ctx context.Context, name string) (Pod, error)

// Rollout is one content version to announce to a set of pods.
type Rollout struct {
	// ID names the version in results and logs (commit:<sha> or timestamp:<ts>).
	ID string
	// Protocol selects push or long-poll.
	Protocol Protocol
	// Timestamp is the version's timestamp.txt value.
	Timestamp int64
	// Token is the workload's reload token, sent as "Authorization: Token <token>".
	Token string
	// Body is the push request body, built once with PushBody and shared, read-only, by every
	// request. Pods that accept a compressed body get it compressed, once per body: Runs with
	// the same Body (the steps of one publish) share the compressed form.
	Body []byte
	// Pods are the selected pods.
	Pods []Pod
	// Refresh re-reads a pod before each attempt; nil uses Pods as given.
	Refresh Refresher
	// Progress, when set, is called at most once per ProgressInterval while counts change, and
	// once at the end. It must not block for long.
	Progress func(Progress)
}

// Outcome of one pod.
type Outcome string

// Outcomes.
const (
	Notified Outcome = "notified"
	Failed   Outcome = "failed"
	Skipped  Outcome = "skipped"
)

// PodResult is what happened to one pod.
type PodResult struct {
	Name     string
	Outcome  Outcome
	Reason   string
	Attempts int
	// Status is the last HTTP status the pod answered (0 when it never answered).
	Status int
	// Coding is the content coding of the last body sent to the pod.
	Coding Coding
}

// Progress are running counts.
type Progress struct {
	Total, Notified, Failed, Skipped int
}

// Done is the number of pods with a final outcome.
func (p Progress) Done() int { return p.Notified + p.Failed + p.Skipped }

// Result of a rollout.
type Result struct {
	Progress
	// Pods lists every pod's result in the order of Rollout.Pods.
	Pods []PodResult
	// Duration of the rollout.
	Duration time.Duration
	// TimedOut is set when the rollout deadline ended it.
	TimedOut bool
	// BodyBytes is the number of request body bytes sent to pods, every attempt counted.
	BodyBytes int64
}

// Succeeded reports whether no pod failed (skipped pods do not count against a rollout).
func (r Result) Succeeded() bool { return r.Failed == 0 }

// FailedPods returns the failed pods' results.
func (r Result) FailedPods() []PodResult {
	var out []PodResult
	for _, p := range r.Pods {
		if p.Outcome == Failed {
			out = append(out, p)
		}
	}
	return out
}

// PushBody encodes the push request body {"timestamp":"<ts>","source":"operator","decofile":<json>}
// once; decofile must be valid JSON and is embedded byte for byte, so the pod stores exactly the
// content whose hash the operator recorded.
func PushBody(ts int64, decofile []byte) []byte {
	const head, mid = `{"timestamp":"`, `","source":"operator","decofile":`
	b := make([]byte, 0, len(head)+20+len(mid)+len(decofile)+1)
	b = append(b, head...)
	b = strconv.AppendInt(b, ts, 10)
	b = append(b, mid...)
	b = append(b, decofile...)
	return append(b, '}')
}

// Notifier runs rollouts with one Config.
type Notifier struct {
	cfg      Config
	payloads payloads
	codings  podCodings
}

// New returns a Notifier; zero Config fields take the defaults.
func New(cfg Config) *Notifier { return &Notifier{cfg: cfg.withDefaults()} }

// Config returns the effective configuration.
func (n *Notifier) Config() Config { return n.cfg }

// Run notifies every pod of r and reports each pod's outcome. It returns when every pod has an
// outcome or the rollout timeout (or ctx) ends it; pods not confirmed by then fail.
func (n *Notifier) Run(ctx context.Context, r Rollout) Result {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	defer cancel()

	var body *payload
	if r.Protocol != ProtocolLongPoll {
		body = n.payloads.get(r.Body)
	}
	var sent atomic.Int64

	results := make([]PodResult, len(r.Pods))
	var notified, failed, skipped atomic.Int64
	count := func(o Outcome) {
		switch o {
		case Notified:
			notified.Add(1)
		case Failed:
			failed.Add(1)
		case Skipped:
			skipped.Add(1)
		}
	}
	snapshot := func() Progress {
		return Progress{Total: len(r.Pods), Notified: int(notified.Load()), Failed: int(failed.Load()), Skipped: int(skipped.Load())}
	}

	stopProgress := make(chan struct{})
	var progressDone sync.WaitGroup
	if r.Progress != nil {
		progressDone.Go(func() {
			t := time.NewTicker(n.cfg.ProgressInterval)
			defer t.Stop()
			last := Progress{Total: -1}
			for {
				select {
				case <-stopProgress:
					return
				case <-t.C:
					if p := snapshot(); p != last {
						last = p
						r.Progress(p)
					}
				}
			}
		})
	}

	// A fixed pool of workers takes pods in order; no goroutine per pod is parked on a semaphore.
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range min(n.cfg.Concurrency, len(r.Pods)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(r.Pods) {
					return
				}
				if ctx.Err() != nil {
					results[i] = PodResult{Name: r.Pods[i].Name, Outcome: Failed, Reason: "not notified before the rollout timeout"}
				} else {
					results[i] = n.notifyPod(ctx, r, body, &sent, r.Pods[i])
				}
				count(results[i].Outcome)
			}
		})
	}
	wg.Wait()
	close(stopProgress)
	progressDone.Wait()

	res := Result{Progress: snapshot(), Pods: results, Duration: time.Since(start), BodyBytes: sent.Load(),
		TimedOut: ctx.Err() != nil && errors.Is(context.Cause(ctx), context.DeadlineExceeded)}
	if r.Progress != nil {
		r.Progress(res.Progress)
	}
	return res
}

// permanentError marks an answer that another attempt cannot change (401, 400, 404).
type permanentError struct{ error }

func (n *Notifier) notifyPod(ctx context.Context, r Rollout, body *payload, sent *atomic.Int64, pod Pod) PodResult {
	res := PodResult{Name: pod.Name}
	backoff := wait.Backoff{Duration: n.cfg.Backoff, Factor: 2, Steps: n.cfg.Attempts}
	for attempt := 1; attempt <= n.cfg.Attempts; attempt++ {
		if r.Refresh != nil {
			fresh, err := r.Refresh(ctx, pod.Name)
			if err != nil {
				res.Outcome, res.Reason = Failed, fmt.Sprintf("re-read pod: %v", err)
				return res
			}
			pod = fresh
		}
		if pod.SkipReason == "" && pod.IP == "" {
			pod.SkipReason = "no pod IP"
		}
		if pod.SkipReason != "" {
			res.Outcome, res.Reason = Skipped, pod.SkipReason
			return res
		}
		res.Attempts = attempt
		status, coding, err := n.sendCoded(ctx, r, body, sent, pod)
		res.Status, res.Coding = status, coding
		if err == nil {
			res.Outcome, res.Reason = Notified, ""
			return res
		}
		res.Outcome, res.Reason = Failed, err.Error()
		var perm permanentError
		if errors.As(err, &perm) || attempt == n.cfg.Attempts {
			return res
		}
		select {
		case <-ctx.Done():
			res.Reason += " (rollout timeout before the next attempt)"
			return res
		case <-time.After(backoff.Step()):
		}
	}
	return res
}

// errRefusedCoding is a 415 answer to a compressed body: the same attempt is made again plain.
var errRefusedCoding = errors.New("the pod refused the compressed body (HTTP 415)")

// sendCoded makes one attempt on one pod with the coding it accepts, and again with the plain
// body when it refuses that coding.
func (n *Notifier) sendCoded(ctx context.Context, r Rollout, body *payload, sent *atomic.Int64, pod Pod) (int, Coding, error) {
	coding := Identity
	if body != nil && !n.cfg.DisableCompression && len(body.plain) >= minCompressBytes {
		coding = n.codings.choose(pod)
	}
	var data []byte
	if body != nil {
		var err error
		if data, err = body.body(coding); err != nil {
			// Content that does not compress (or, in theory, a failing encoder): the plain body
			// works for every pod.
			coding, data = Identity, body.plain
		}
	}
	status, err := n.send(ctx, r, data, coding, sent, pod)
	if errors.Is(err, errRefusedCoding) {
		coding = Identity
		status, err = n.send(ctx, r, body.plain, coding, sent, pod)
	}
	return status, coding, err
}

// send makes one request to one pod with data (the push body, in coding) or the long-poll query.
func (n *Notifier) send(ctx context.Context, r Rollout, data []byte, coding Coding, sent *atomic.Int64, pod Pod) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.PodTimeout)
	defer cancel()
	host := net.JoinHostPort(pod.IP, strconv.Itoa(int(pod.Port)))
	var req *http.Request
	var err error
	switch r.Protocol {
	case ProtocolLongPoll:
		mount := pod.MountPath
		if mount == "" {
			mount = decov1alpha1.DefaultMountPath
		}
		q := url.Values{"timestamp": {strconv.FormatInt(r.Timestamp, 10)}, "tsFile": {path.Join(mount, decov1alpha1.KeyTimestamp)}}
		u := url.URL{Scheme: "http", Host: host, Path: decov1alpha1.ReloadPath, RawQuery: q.Encode()}
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	default:
		u := url.URL{Scheme: "http", Host: host, Path: decov1alpha1.ReloadPath}
		// Every request reads the one shared body: no per-pod copy of the payload.
		open := opener(data)
		body, _ := open()
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, u.String(), body)
		if err == nil {
			req.ContentLength = int64(len(data))
			req.GetBody = open
			req.Header.Set("Content-Type", "application/json")
			if coding != Identity {
				req.Header.Set("Content-Encoding", coding.String())
			}
			sent.Add(int64(len(data)))
		}
	}
	if err != nil {
		return 0, permanentError{fmt.Errorf("build request: %w", err)}
	}
	token := r.Token
	if pod.Token != "" {
		token = pod.Token
	}
	req.Header.Set("Authorization", "Token "+token)
	resp, err := n.cfg.Client.Do(req)
	if err != nil {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return 0, fmt.Errorf("no answer within %s", n.cfg.PodTimeout)
		}
		// Transport errors may quote what the pod sent (a malformed status line): keep them short
		// and printable too.
		return 0, fmt.Errorf("request failed%s", printable([]byte(unwrapURLError(err).Error()), maxErrorBytes))
	}
	defer resp.Body.Close()
	if r.Protocol != ProtocolLongPoll {
		refused := coding != Identity && resp.StatusCode == http.StatusUnsupportedMediaType
		n.codings.learn(pod.UID, resp.Header.Values("Accept-Encoding"), coding, refused)
		if refused {
			return resp.StatusCode, errRefusedCoding
		}
	}
	// Only a short, sanitized excerpt of what the pod answered goes into results (and from there
	// into status, Events and logs); the rest is not read: keep-alives are off.
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, MaxExcerptBytes))
	switch code := resp.StatusCode; {
	case code == http.StatusOK:
		return code, loadedReport(snippet)
	case code == http.StatusUnprocessableEntity:
		return code, permanentError{fmt.Errorf("HTTP %d: the pod could not load the content%s", code, Excerpt(snippet))}
	case code >= 300 && code < 400:
		return code, permanentError{fmt.Errorf("HTTP %d: the pod answered with a redirect, which is not followed; its %s must answer the reload itself",
			code, decov1alpha1.ReloadPath)}
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return code, permanentError{fmt.Errorf("HTTP %d: the pod rejected the reload token (its %s differs from the Decofile's reload Secret)",
			code, decov1alpha1.EnvReloadToken)}
	case code == http.StatusBadRequest && coding != Identity:
		// Not a permanent answer: a runtime replaced in place may no longer read the coding its
		// predecessor advertised, and its answer (without Accept-Encoding) makes the next attempt plain.
		return code, fmt.Errorf("HTTP %d to a %s body%s", code, coding, Excerpt(snippet))
	case code == http.StatusBadRequest || code == http.StatusNotFound || code == http.StatusMethodNotAllowed:
		return code, permanentError{fmt.Errorf("HTTP %d%s", code, Excerpt(snippet))}
	default:
		return code, fmt.Errorf("HTTP %d%s", code, Excerpt(snippet))
	}
}

// MaxExcerptBytes bounds the part of a pod's answer that is read and reported.
const MaxExcerptBytes = 128

// Excerpt turns the start of a pod's answer into ": <text>" fit for a condition message: at most
// MaxExcerptBytes, printable ASCII only (control characters and other bytes become spaces, runs
// of spaces one), or "" when nothing printable is left.
func Excerpt(b []byte) string { return printable(b, MaxExcerptBytes) }

// maxErrorBytes bounds a transport error's text in a result.
const maxErrorBytes = 200

func printable(b []byte, limit int) string {
	b = b[:min(len(b), limit)]
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c < 0x20 || c > 0x7e {
			c = ' '
		}
		if c == ' ' && (len(out) == 0 || out[len(out)-1] == ' ') {
			continue
		}
		out = append(out, c)
	}
	out = bytes.TrimRight(out, " ")
	if len(out) == 0 {
		return ""
	}
	return ": " + string(out)
}

// unwrapURLError drops the "Post \"http://…\":" prefix: the pod is named by the caller.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
