// Package push receives push events from git hosts (GitHub, Gitea, Forgejo, GitLab) and asks
// for an immediate reconcile of every Decofile that follows the pushed repository and branch.
// Polling stays the safety net: a lost, refused or late event only means the change arrives at
// the next spec.interval.
//
// Everything a request carries is untrusted until its signature (or GitLab's token) matches
// the configured secret; even then an event only makes the operator re-resolve refs it already
// follows, which is harmless. Requests are bounded in size, rate and concurrency, and a
// delivery seen before (same delivery ID or same signed body) by any replica does nothing: the
// replay cache is kept in Leases on the API server, which every replica reaches.
package push

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Path is where the receiver accepts events; every provider posts to the same path.
const Path = "/hooks/push"

// Defaults of Config.
const (
	DefaultMaxBodyBytes = 4 << 20
	DefaultRate         = 10
	DefaultBurst        = 50
	DefaultReplayWindow = time.Hour
	// DefaultMaxInFlight bounds requests being read and verified at once, and so the memory
	// bodies take (at most DefaultMaxInFlight × MaxBodyBytes).
	DefaultMaxInFlight = 8
	replayEntries      = 10_000
)

// Trigger reconciles the Decofiles that follow any of keys and says how many it asked for.
type Trigger interface {
	Trigger(ctx context.Context, keys []string) (int, error)
}

// Config configures a Receiver.
type Config struct {
	// Addr is the listen address, e.g. ":9445".
	Addr string
	// Listener, when set, is used instead of listening on Addr (tests).
	Listener net.Listener
	// Secret signs GitHub, Gitea and Forgejo deliveries and is GitLab's X-Gitlab-Token.
	Secret []byte
	// Trigger reconciles the Decofiles that follow a pushed ref.
	Trigger Trigger
	// MaxBodyBytes is the largest body read; larger ones are refused with 413.
	MaxBodyBytes int64
	// Rate and Burst bound the requests served per second (all senders together); over it: 429.
	Rate  float64
	Burst int
	// MaxInFlight bounds requests being read at once; over it: 429.
	MaxInFlight int
	// ReplayWindow is how long a delivery is remembered so a replay of it does nothing.
	ReplayWindow time.Duration
	// Client keeps the replay cache: one coordination.k8s.io Lease per remembered key in
	// Namespace, so a delivery one replica handled is a replay for all of them. It should not
	// read from the manager's cache (Leases are not cached). Without it a receiver remembers
	// deliveries in its own memory only, which holds for a single replica (tests, dev).
	Client client.Client
	// Namespace holds the replay cache's Leases: the manager's own namespace.
	Namespace string
	// MaxReplayLeases bounds the Leases the sweep leaves; 0 means DefaultMaxReplayLeases.
	MaxReplayLeases int
	// SweepInterval is how often the Sweeper runs; 0 means DefaultReplaySweepInterval.
	SweepInterval time.Duration
	// Now is the clock (tests); nil means time.Now.
	Now func() time.Time
}

// Receiver serves Path. It is a manager Runnable that runs on every replica: the Service may
// send an event to any of them, and the Trigger decides how a replica that is not the leader
// passes it on.
type Receiver struct {
	cfg      Config
	srv      *http.Server
	limiter  *rate.Limiter
	inFlight chan struct{}
	shared   *replays

	// seen is each replica's own memory of the deliveries it acted on, looked at before the
	// shared cache: a replay sent to the same replica costs no API request.
	mu    sync.Mutex
	seen  map[string]time.Time
	order []string
}

// NewReceiver checks cfg and fills its defaults.
func NewReceiver(cfg Config) (*Receiver, error) {
	if len(cfg.Secret) == 0 {
		return nil, errors.New("push receiver: no secret: set --push-webhook-secret-file or the PUSH_WEBHOOK_SECRET environment variable")
	}
	if cfg.Trigger == nil {
		return nil, errors.New("push receiver: no trigger")
	}
	if cfg.Client != nil && cfg.Namespace == "" {
		return nil, errors.New("push receiver: no namespace for the replay cache's Leases: set POD_NAMESPACE to the manager's namespace")
	}
	if cfg.MaxReplayLeases <= 0 {
		cfg.MaxReplayLeases = DefaultMaxReplayLeases
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = DefaultReplaySweepInterval
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Rate <= 0 {
		cfg.Rate = DefaultRate
	}
	if cfg.Burst <= 0 {
		cfg.Burst = DefaultBurst
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = DefaultMaxInFlight
	}
	if cfg.ReplayWindow <= 0 {
		cfg.ReplayWindow = DefaultReplayWindow
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &Receiver{
		cfg:      cfg,
		limiter:  rate.NewLimiter(rate.Limit(cfg.Rate), cfg.Burst),
		inFlight: make(chan struct{}, cfg.MaxInFlight),
		seen:     map[string]time.Time{},
	}
	if cfg.Client != nil {
		r.shared = &replays{c: cfg.Client, namespace: cfg.Namespace, window: cfg.ReplayWindow,
			max: cfg.MaxReplayLeases, interval: cfg.SweepInterval, now: cfg.Now}
	}
	mux := http.NewServeMux()
	mux.Handle(Path, r)
	r.srv = &http.Server{
		Addr:              cfg.Addr,
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	return r, nil
}

// Start serves until ctx ends, then shuts down gracefully.
func (r *Receiver) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("push-receiver")
	r.srv.BaseContext = func(net.Listener) context.Context { return ctx }
	l := r.cfg.Listener
	if l == nil {
		var err error
		if l, err = net.Listen("tcp", r.cfg.Addr); err != nil {
			return fmt.Errorf("push receiver: listen on %s (--push-webhook-bind-address): %w", r.cfg.Addr, err)
		}
	}
	log.Info("serving push events", "addr", l.Addr().String(), "path", Path)
	timeout := 10 * time.Second
	srv := &manager.Server{Name: "push-receiver", Server: r.srv, Listener: l, ShutdownTimeout: &timeout}
	if err := srv.Start(ctx); err != nil {
		return fmt.Errorf("push receiver: %w", err)
	}
	return nil
}

// NeedLeaderElection is false: every replica receives events.
func (r *Receiver) NeedLeaderElection() bool { return false }

// Sweeper returns the Runnable that keeps the replay cache's Leases within the window and the
// bound; add it to the manager beside the Receiver. Without Config.Client it does nothing.
func (r *Receiver) Sweeper() *Sweeper { return &Sweeper{r: r.shared} }

// ServeHTTP handles one delivery.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	log := logf.FromContext(req.Context()).WithName("push-receiver")
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		reply(w, http.StatusMethodNotAllowed, "only POST is accepted")
		return
	}
	d, ok := identify(req.Header)
	if !ok {
		count("unknown", ResultBadRequest)
		reply(w, http.StatusBadRequest, "no X-GitHub-Event, X-Gitea-Event, X-Forgejo-Event or X-Gitlab-Event header: not a push event")
		return
	}
	// Bounded before anything is read: a flood of requests, signed or not, costs little.
	if !r.limiter.Allow() {
		count(d.provider, ResultRateLimited)
		w.Header().Set("Retry-After", "1")
		reply(w, http.StatusTooManyRequests, "too many events; the next poll picks the change up")
		return
	}
	select {
	case r.inFlight <- struct{}{}:
		defer func() { <-r.inFlight }()
	default:
		count(d.provider, ResultRateLimited)
		w.Header().Set("Retry-After", "1")
		reply(w, http.StatusTooManyRequests, "too many events at once; the next poll picks the change up")
		return
	}
	if req.ContentLength > r.cfg.MaxBodyBytes {
		count(d.provider, ResultTooLarge)
		reply(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes (--push-webhook-max-body-bytes)", r.cfg.MaxBodyBytes))
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, r.cfg.MaxBodyBytes+1))
	if err != nil {
		count(d.provider, ResultBadRequest)
		reply(w, http.StatusBadRequest, "could not read the body")
		return
	}
	if int64(len(body)) > r.cfg.MaxBodyBytes {
		count(d.provider, ResultTooLarge)
		reply(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes (--push-webhook-max-body-bytes)", r.cfg.MaxBodyBytes))
		return
	}
	if err := d.verify(body, r.cfg.Secret); err != nil {
		count(d.provider, ResultUnauthorized)
		log.Info("push event refused", "provider", d.provider, "reason", err.Error(), "remote", req.RemoteAddr)
		reply(w, http.StatusUnauthorized, "signature missing or wrong: sign with the secret the operator was given")
		return
	}
	// Only signed deliveries are remembered: an unsigned request cannot make a later real
	// delivery look like a replay.
	keys := replayKeys(d, body)
	claims, err := r.remember(req.Context(), keys)
	switch {
	case errors.Is(err, errReplayed):
		count(d.provider, ResultDuplicate)
		reply(w, http.StatusOK, "delivery already handled")
		return
	case err != nil:
		// Fail closed: a delivery that cannot be checked is not acted on (it could be a replay
		// another replica handled). A push event is only a hint; the poll picks the change up,
		// and a sender that retries is acted on once the API server answers.
		count(d.provider, ResultError)
		replayErrors.WithLabelValues(opCheck).Inc()
		log.Error(err, "push event not checked against the replay cache", "provider", d.provider)
		w.Header().Set("Retry-After", "60")
		reply(w, http.StatusServiceUnavailable, "could not check whether this delivery was handled before; retry later, the next poll picks the change up")
		return
	}
	switch d.kind() {
	case KindPing:
		count(d.provider, ResultPing)
		reply(w, http.StatusOK, "pong")
		return
	case KindOther:
		count(d.provider, ResultIgnored)
		reply(w, http.StatusAccepted, "not a push event: nothing to do")
		return
	}
	p, err := parsePush(d.provider, body)
	if err != nil {
		count(d.provider, ResultBadRequest)
		reply(w, http.StatusBadRequest, err.Error())
		return
	}
	n, err := r.cfg.Trigger.Trigger(req.Context(), p.Keys)
	if err != nil {
		// Not acted on: forgotten, so the sender's retry is.
		r.forget(req.Context(), keys, claims)
		count(d.provider, ResultError)
		log.Error(err, "push event not passed on", "provider", d.provider, "repository", p.Repository, "ref", p.Ref)
		reply(w, http.StatusServiceUnavailable, "could not pass the event on; the next poll picks the change up")
		return
	}
	result := ResultTriggered
	if n == 0 {
		result = ResultUnmatched
	}
	count(d.provider, result)
	triggeredTotal.Add(float64(n))
	log.Info("push event", "provider", d.provider, "delivery", d.id, "repository", p.Repository, "ref", p.Ref, "decofiles", n)
	// The same answer whether or not a Decofile follows the repository: a sender learns nothing
	// about which repositories the cluster's Decofiles follow.
	reply(w, http.StatusAccepted, "accepted")
}

// replayKeys are what a delivery is remembered by: the body's digest and, when the sender gives
// one, the delivery ID. The body counts too because the delivery ID is not signed.
func replayKeys(d delivery, body []byte) []replayKey {
	sum := sha256.Sum256(body)
	keys := []replayKey{{kind: "body", key: d.provider + " " + string(sum[:])}}
	if d.id != "" {
		keys = append(keys, replayKey{kind: "id", key: d.provider + " " + d.id})
	}
	return keys
}

// remember reports errReplayed when any of keys was seen within ReplayWindow, by this replica
// (its memory) or any other (the shared Leases); otherwise it takes the keys' Leases and
// returns them. Any other error means the delivery could not be checked.
func (r *Receiver) remember(ctx context.Context, keys []replayKey) ([]claim, error) {
	now := r.cfg.Now()
	if r.seenHere(keys, now) {
		return nil, errReplayed
	}
	var claims []claim
	if r.shared != nil {
		var err error
		if claims, err = r.shared.claimAll(ctx, keys); err != nil {
			return nil, err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range keys {
		id := k.kind + " " + k.key
		r.seen[id] = now
		r.order = append(r.order, id)
	}
	return claims, nil
}

// seenHere reports whether this replica saw any of keys within ReplayWindow, first forgetting
// what fell out of the window (oldest first) and, past the bound, the oldest.
func (r *Receiver) seenHere(keys []replayKey, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.order) > 0 {
		k := r.order[0]
		if at, ok := r.seen[k]; ok && now.Sub(at) < r.cfg.ReplayWindow && len(r.order) < replayEntries {
			break
		}
		delete(r.seen, k)
		r.order = r.order[1:]
	}
	for _, k := range keys {
		if at, ok := r.seen[k.kind+" "+k.key]; ok && now.Sub(at) < r.cfg.ReplayWindow {
			return true
		}
	}
	return false
}

// forget lets go of a delivery that was not acted on, here and in the shared cache.
func (r *Receiver) forget(ctx context.Context, keys []replayKey, claims []claim) {
	r.mu.Lock()
	for _, k := range keys {
		delete(r.seen, k.kind+" "+k.key)
	}
	r.mu.Unlock()
	if r.shared == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), replayTimeout)
	defer cancel()
	r.shared.release(ctx, claims)
}

func reply(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
}
