// Package audit receives the Kubernetes API server's audit webhook and turns accepted, mutating
// audit events into attribution facts.
//
// The API server posts audit.k8s.io/v1 EventLists to POST /audit-webhook/<route> over HTTPS; the
// route names the cluster (API server) the events come from, so one receiver can serve several.
// Clients must present a certificate signed by the --audit-client-ca bundle whose common name or
// DNS name is one of --audit-client-names: the CA alone also signs nodes and users. A store failure
// answers 503 so the API server's webhook backend retries the batch; facts are idempotent.
package audit

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/siteops/siteops/internal/mirror/clientauth"
)

// PathPrefix is the URL path the receiver serves; the route follows it.
const PathPrefix = "/audit-webhook/"

// DefaultMaxBodyBytes bounds one request body. The API server's default batch is 400 events;
// at the RequestResponse level each can carry two copies of an object.
const DefaultMaxBodyBytes = 32 << 20

// routePattern keeps routes usable as one key segment and in URLs.
var routePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ValidRoute reports whether route may name an audit source.
func ValidRoute(route string) bool { return routePattern.MatchString(route) }

// FactRecorder stores attribution facts (the store's AttributionIndex).
type FactRecorder interface {
	RecordFact(ctx context.Context, auditRoute string, event auditv1.Event) error
	RecordDeleteCollectionFacts(ctx context.Context, auditRoute string, event auditv1.Event) error
	// Announce tells the resolvers of every replica, in one message, which facts of events are
	// stored now, so the watch events waiting for them look at once instead of polling.
	Announce(ctx context.Context, auditRoute string, events []auditv1.Event) error
}

// Handler is the audit webhook's HTTP handler, without TLS; Receiver serves it over mTLS.
type Handler struct {
	// Recorder stores the facts.
	Recorder FactRecorder
	// MaxBodyBytes bounds a request body; 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// OnRecorded, when set, is called after a batch recorded at least one fact (and announced
	// it to every replica through the recorder).
	OnRecorded func()
	// StoreTimeout bounds the Redis writes of one batch; 0 means 10s.
	StoreTimeout time.Duration
}

// Filter reasons, also the "filtered" detail in logs.
const (
	reasonStage       = "stage"
	reasonVerb        = "verb"
	reasonStatus      = "status"
	reasonDryRun      = "dry-run"
	reasonSubresource = "subresource"
	reasonNoObject    = "no-object"
)

var mutatingVerbs = map[string]bool{"create": true, "update": true, "patch": true, "delete": true, "deletecollection": true}

// Accept reports whether an audit event can name the author of a change, and if not, why:
// only completed, successful, persisted (not dry-run) writes to an object or its scale.
func Accept(ev *auditv1.Event) (bool, string) {
	switch {
	case ev.Stage != auditv1.StageResponseComplete:
		return false, reasonStage
	case !mutatingVerbs[ev.Verb]:
		return false, reasonVerb
	case ev.ResponseStatus == nil || ev.ResponseStatus.Code < 200 || ev.ResponseStatus.Code >= 300:
		return false, reasonStatus
	case ev.ObjectRef == nil || ev.ObjectRef.Resource == "":
		return false, reasonNoObject
	case ev.ObjectRef.Subresource != "" && ev.ObjectRef.Subresource != "scale":
		return false, reasonSubresource
	case isDryRun(ev.RequestURI):
		return false, reasonDryRun
	}
	return true, ""
}

// isDryRun reads the dryRun query parameter of the request URI; any value is a dry run (the API
// server accepts only "All"). An unparseable URI is treated as a dry run: it cannot be trusted to
// have persisted anything.
func isDryRun(requestURI string) bool {
	i := strings.IndexByte(requestURI, '?')
	if i < 0 {
		return false
	}
	q, err := url.ParseQuery(requestURI[i+1:])
	if err != nil {
		return true
	}
	_, ok := q["dryRun"]
	return ok
}

// ServeHTTP handles one EventList delivery.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	log := logf.FromContext(r.Context()).WithName("audit-webhook")
	route, ok := strings.CutPrefix(r.URL.Path, PathPrefix)
	if !ok || !ValidRoute(route) {
		http.Error(w, "unknown path: post audit events to "+PathPrefix+"<route>, route of letters, digits, '.', '_', '-'", http.StatusNotFound)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed: use POST", http.StatusMethodNotAllowed)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		http.Error(w, "unsupported content type "+ct+": the audit webhook must send application/json", http.StatusUnsupportedMediaType)
		return
	}
	limit := h.MaxBodyBytes
	if limit <= 0 {
		limit = DefaultMaxBodyBytes
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			AuditEvents.WithLabelValues("rejected").Inc()
			http.Error(w, fmt.Sprintf("body larger than %d bytes: lower --audit-webhook-batch-max-size", limit), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	list, err := decodeEventList(body)
	if err != nil {
		AuditEvents.WithLabelValues("rejected").Inc()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	timeout := h.StoreTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	var failed, recorded int
	var firstErr error
	var stored []auditv1.Event
	for i := range list.Items {
		ev := &list.Items[i]
		if ok, _ := Accept(ev); !ok {
			AuditEvents.WithLabelValues("filtered").Inc()
			continue
		}
		err := h.Recorder.RecordFact(ctx, route, *ev)
		kind := "object"
		if err == nil && ev.Verb == "deletecollection" {
			kind = "deletecollection"
			err = h.Recorder.RecordDeleteCollectionFacts(ctx, route, *ev)
		}
		if err != nil {
			failed++
			if firstErr == nil {
				firstErr = err
			}
			AuditEvents.WithLabelValues("error").Inc()
			continue
		}
		recorded++
		stored = append(stored, *ev)
		AuditEvents.WithLabelValues("recorded").Inc()
		FactsRecorded.WithLabelValues(kind).Inc()
	}
	if recorded > 0 {
		// Announced even when part of the batch failed: what is stored may be used now.
		if err := h.Recorder.Announce(ctx, route, stored); err != nil {
			log.Error(err, "announce stored audit facts; waiting changes find them when their grace period ends", "route", route)
		}
		if h.OnRecorded != nil {
			h.OnRecorded()
		}
	}
	if failed > 0 {
		log.Error(firstErr, "store audit facts; the API server will retry the batch", "route", route, "failed", failed, "events", len(list.Items))
		http.Error(w, fmt.Sprintf("could not store %d of %d audit events: %v", failed, len(list.Items), firstErr), http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// decodeEventList parses an audit.k8s.io/v1 EventList and rejects anything else.
func decodeEventList(body []byte) (*auditv1.EventList, error) {
	var list auditv1.EventList
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("body is not an audit.k8s.io/v1 EventList: %w", err)
	}
	if list.APIVersion != auditv1.SchemeGroupVersion.String() || list.Kind != "EventList" {
		return nil, fmt.Errorf("body is %q %q, want apiVersion %q kind EventList: configure the audit webhook with --audit-webhook-version=%s",
			list.APIVersion, list.Kind, auditv1.SchemeGroupVersion.String(), auditv1.SchemeGroupVersion.String())
	}
	return &list, nil
}

// Config configures a Receiver.
type Config struct {
	// Addr is the listen address, e.g. ":9444".
	Addr string
	// CertDir holds the serving certificate tls.crt and key tls.key; they are reloaded on change.
	CertDir string
	// ClientCAFile is the PEM bundle client certificates must chain to (--audit-client-ca).
	ClientCAFile string
	// ClientNames are the identities accepted from that CA (--audit-client-names): a client
	// certificate's common name or one of its DNS names must be one of them.
	ClientNames []string
	// Handler is the audit webhook handler.
	Handler *Handler
	// ReadTimeout and WriteTimeout bound a request; 0 means 30s.
	ReadTimeout, WriteTimeout time.Duration
	// Listener, when set, is used instead of listening on Addr (tests).
	Listener net.Listener
}

// Receiver serves the audit webhook over mutual TLS. It is a manager Runnable that runs on every
// replica (not only the leader): the API server may deliver to any of them, and facts go to the
// shared store.
type Receiver struct {
	cfg Config
	srv *http.Server
	cw  *certwatcher.CertWatcher
}

// NewReceiver checks cfg and loads the serving certificate and client CA.
func NewReceiver(cfg Config) (*Receiver, error) {
	if cfg.Handler == nil || cfg.Handler.Recorder == nil {
		return nil, errors.New("audit receiver: no fact recorder configured")
	}
	clients, err := clientauth.Load("--audit-client-ca", cfg.ClientCAFile, cfg.ClientNames)
	if err != nil {
		return nil, fmt.Errorf("audit receiver: %w (set --audit-client-names to the API server's client certificate name)", err)
	}
	cw, err := certwatcher.New(filepath.Join(cfg.CertDir, "tls.crt"), filepath.Join(cfg.CertDir, "tls.key"))
	if err != nil {
		return nil, fmt.Errorf("audit receiver: load serving certificate from %s (tls.crt, tls.key): %w", cfg.CertDir, err)
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = 30 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	mux := http.NewServeMux()
	mux.Handle(PathPrefix, cfg.Handler)
	srv := &http.Server{
		Addr:              cfg.Addr,
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		TLSConfig: &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: cw.GetCertificate,
		},
	}
	clients.ServerTLS(srv.TLSConfig)
	return &Receiver{cfg: cfg, srv: srv, cw: cw}, nil
}

// Start serves until ctx ends, then shuts down gracefully.
func (r *Receiver) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("audit-receiver")
	r.srv.BaseContext = func(net.Listener) context.Context { return ctx }
	go func() { _ = r.cw.Start(ctx) }()
	l := r.cfg.Listener
	if l == nil {
		var err error
		if l, err = net.Listen("tcp", r.cfg.Addr); err != nil {
			return fmt.Errorf("audit receiver: listen on %s: %w", r.cfg.Addr, err)
		}
	}
	log.Info("serving the audit webhook", "addr", l.Addr().String(), "path", PathPrefix+"<route>")
	timeout := 10 * time.Second
	srv := &manager.Server{Name: "audit-receiver", Server: r.srv, Listener: tls.NewListener(l, r.srv.TLSConfig), ShutdownTimeout: &timeout}
	if err := srv.Start(ctx); err != nil {
		return fmt.Errorf("audit receiver: %w", err)
	}
	return nil
}

// NeedLeaderElection is false: every replica receives audit events.
func (r *Receiver) NeedLeaderElection() bool { return false }
