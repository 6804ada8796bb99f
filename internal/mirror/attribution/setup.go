package attribution

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/siteops/siteops/internal/mirror/audit"
	"github.com/siteops/siteops/internal/mirror/gitwriter"
	"github.com/siteops/siteops/internal/mirror/store"
	"github.com/siteops/siteops/internal/mirror/watch"
)

// Options configures author attribution and its audit receiver.
type Options struct {
	// Enabled turns attribution on (--author-attribution).
	Enabled bool
	// Grace is how long a watch event waits for its fact.
	Grace time.Duration
	// FactTTL is the lifetime of a fact in Redis.
	FactTTL time.Duration
	// Route is the audit route the API server posts to (/audit-webhook/<route>).
	Route string
	// ListenAddress, CertDir and ClientCAFile configure the audit receiver.
	ListenAddress string
	CertDir       string
	ClientCAFile  string
	// ClientNames are the client certificate names (common name or DNS name) accepted from
	// ClientCAFile: the API server's, not any client of that CA.
	ClientNames []string
	// MaxWaiting caps the watch events waiting for their audit facts at once; past it, events
	// go through at once as the committer's (result absent). 0 means DefaultMaxWaiting.
	MaxWaiting int
	// NoreplyDomain is the domain of derived author emails.
	NoreplyDomain string
}

// DefaultRoute is the audit route when --author-attribution-route is not set.
const DefaultRoute = "default"

// DefaultAuditClientName is the accepted audit client when --audit-client-names is not set: the
// common name API servers' client certificates usually carry.
const DefaultAuditClientName = "kube-apiserver"

// BindFlags registers the attribution flags.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	if o.Grace == 0 {
		o.Grace = DefaultGrace
	}
	if o.FactTTL == 0 {
		o.FactTTL = store.DefaultAttributionFactTTL
	}
	if o.Route == "" {
		o.Route = DefaultRoute
	}
	if o.ListenAddress == "" {
		o.ListenAddress = ":9444"
	}
	if o.NoreplyDomain == "" {
		o.NoreplyDomain = DefaultNoreplyDomain
	}
	if o.ClientNames == nil {
		o.ClientNames = []string{DefaultAuditClientName}
	}
	if o.MaxWaiting == 0 {
		o.MaxWaiting = DefaultMaxWaiting
	}
	fs.BoolVar(&o.Enabled, "author-attribution", o.Enabled, "mirror: author commits by the user who made each change, from API server audit events (needs --redis-addr and --audit-client-ca)")
	fs.DurationVar(&o.Grace, "author-attribution-grace", o.Grace, "mirror: how long a watch event waits for its audit fact before it is committed by the committer")
	fs.DurationVar(&o.FactTTL, "author-attribution-ttl", o.FactTTL, "mirror: lifetime of an audit fact in Redis")
	fs.StringVar(&o.Route, "author-attribution-route", o.Route, "mirror: audit route of this cluster's API server (it posts to /audit-webhook/<route>)")
	fs.StringVar(&o.ListenAddress, "audit-listen-address", o.ListenAddress, "mirror: address of the HTTPS audit webhook receiver")
	fs.StringVar(&o.CertDir, "audit-cert-dir", o.CertDir, "mirror: folder with the audit receiver's serving certificate tls.crt and key tls.key")
	fs.StringVar(&o.ClientCAFile, "audit-client-ca", o.ClientCAFile, "mirror: PEM bundle the API server's audit client certificate must chain to")
	fs.StringSliceVar(&o.ClientNames, "audit-client-names", o.ClientNames, "mirror: client certificate names (common name or DNS name) the audit receiver accepts from --audit-client-ca: the API server's audit webhook identity")
	fs.IntVar(&o.MaxWaiting, "author-attribution-max-waiting", o.MaxWaiting, "mirror: most watch events waiting for their audit facts at once; past it events are committed by the committer at once (result absent)")
	fs.StringVar(&o.NoreplyDomain, "author-noreply-domain", o.NoreplyDomain, "mirror: mail domain of derived author emails for users without one")
}

// Validate reports flag values that cannot work; it checks nothing when attribution is off.
func (o *Options) Validate() error {
	if !o.Enabled {
		return nil
	}
	var errs []error
	if o.Grace <= 0 {
		errs = append(errs, fmt.Errorf("--author-attribution-grace %v: must be positive", o.Grace))
	}
	if o.FactTTL < o.Grace {
		errs = append(errs, fmt.Errorf("--author-attribution-ttl %v: must be at least the grace period %v, or facts expire before they are used", o.FactTTL, o.Grace))
	}
	if !audit.ValidRoute(o.Route) {
		errs = append(errs, fmt.Errorf("--author-attribution-route %q: use 1-63 letters, digits, '.', '_' or '-'", o.Route))
	}
	if o.ClientCAFile == "" {
		errs = append(errs, errors.New("--author-attribution needs --audit-client-ca: the audit receiver only accepts API servers with a client certificate"))
	}
	if len(o.ClientNames) == 0 {
		errs = append(errs, errors.New("--author-attribution needs --audit-client-names: the audit receiver accepts only the API server's client certificate, not every certificate of the CA"))
	}
	if o.MaxWaiting < 0 {
		errs = append(errs, fmt.Errorf("--author-attribution-max-waiting %d: must be 0 (the default) or more", o.MaxWaiting))
	}
	if o.CertDir == "" {
		errs = append(errs, errors.New("--author-attribution needs --audit-cert-dir with the receiver's serving certificate (tls.crt, tls.key)"))
	}
	return errors.Join(errs...)
}

// Setup builds the resolver and, when attribution is on, adds the audit receiver (on every
// replica) and the stored-facts gauge to mgr. st is the mirror's Redis store; attribution needs
// it. With attribution off it returns a disabled resolver: every change by the committer.
func Setup(mgr ctrl.Manager, st *store.RedisStore, o Options) (*Resolver, error) {
	id := Identity{NoreplyDomain: o.NoreplyDomain}
	if !o.Enabled {
		return New(Config{Identity: id}), nil
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if st == nil {
		return nil, errors.New("--author-attribution needs Redis: set --redis-addr")
	}
	idx := st.AttributionIndex(o.FactTTL)
	r := New(Config{Index: idx, Announcements: idx, Route: o.Route, Grace: o.Grace, Identity: id, MaxWaiting: o.MaxWaiting})
	rcv, err := audit.NewReceiver(audit.Config{
		Addr: o.ListenAddress, CertDir: o.CertDir, ClientCAFile: o.ClientCAFile, ClientNames: o.ClientNames,
		Handler: &audit.Handler{Recorder: idx},
	})
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(rcv); err != nil {
		return nil, fmt.Errorf("add the audit receiver: %w", err)
	}
	if err := mgr.Add(r); err != nil {
		return nil, fmt.Errorf("add the attribution announcement subscription: %w", err)
	}
	if err := mgr.Add(FactGauge{Counter: idx}); err != nil {
		return nil, fmt.Errorf("add the attribution fact gauge: %w", err)
	}
	ctrl.Log.WithName("mirror").Info("author attribution on", "route", o.Route, "grace", o.Grace, "factTTL", o.FactTTL, "auditAddress", o.ListenAddress)
	return r, nil
}

// ConfigureStream routes one watch stream through the resolver: live object events wait for
// their authors concurrently, and everything else keeps its order with them. It has the shape
// of the mirror engine's StreamHook; with attribution off it changes nothing.
func (r *Resolver) ConfigureStream(target types.NamespacedName, _ string, cfg *watch.Config) {
	if !r.Enabled() {
		return
	}
	s := r.NewStream(cfg.Sink, cfg.GVR)
	s.ignoreUsers = cfg.IgnoreUsers
	r.track(target, streamID{cfg.GVR, cfg.Namespace}, s)
	cfg.Sink = s
	cfg.SubmitEvent = func(ctx context.Context, op gitwriter.Op, uid types.UID, rv string, exactCapable bool) error {
		return s.EnqueueEvent(ctx, op, Event{UID: uid, RV: rv, ExactCapable: exactCapable, Namespace: cfg.Namespace})
	}
}
