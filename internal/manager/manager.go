// Package manager builds the siteops-manager: one controller-runtime manager running the parts
// chosen with --controllers, with leader election, probes, metrics and the webhook server.
package manager

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/siteops/siteops/internal/decofile"
	decofilecontroller "github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/decofile/inject"
	"github.com/siteops/siteops/internal/manager/fluxevents"
	"github.com/siteops/siteops/internal/mirror"
	"github.com/siteops/siteops/internal/mirror/commitrequest"
	"github.com/siteops/siteops/internal/mirror/ruleaccess"
	"github.com/siteops/siteops/internal/mirror/store"
	"github.com/siteops/siteops/internal/scheme"
	"github.com/siteops/siteops/internal/shard"
	"github.com/siteops/siteops/internal/tenant"
	"github.com/siteops/siteops/internal/ui"
	"github.com/siteops/siteops/internal/webhookcert"
)

// Part names accepted by --controllers.
const (
	PartDecofile = "decofile"
	PartTenant   = "tenant"
	PartMirror   = "mirror"
)

// Parts lists every part in start order.
var Parts = []string{PartDecofile, PartTenant, PartMirror}

// LegacyParts maps the --controllers names of the published Decofile operator (v0.11) to the
// siteops part that does the same work; "" marks a v0.11 part siteops has no counterpart for
// (Deco, DecoRedirect), accepted and ignored. v0.11's "decofile" is siteops' "decofile".
var LegacyParts = map[string]string{
	"valkey-acl": PartTenant, "valkeyacl": PartTenant, "valkey": PartTenant,
	"deco": "", "decoredirect": "", "deco-redirect": "",
}

// Options configures the manager and every part.
type Options struct {
	// MetricsAddr serves Prometheus metrics; "0" disables it.
	MetricsAddr string
	// SecondInProcess lets this manager's controllers have the names another manager of the
	// same process already uses: for tests and benchmarks that start one manager after another.
	SecondInProcess bool
	// ProbeAddr serves /healthz and /readyz.
	ProbeAddr string
	// PprofAddr serves Go's /debug/pprof profiles; empty or "0" (the default) disables it.
	PprofAddr string
	// LeaderElect makes only one replica run controllers at a time.
	LeaderElect bool
	// LeaderElectionID names the Lease used for leader election.
	LeaderElectionID string
	// LeaderElectionNamespace holds the Lease; empty means the manager's own namespace.
	LeaderElectionNamespace string
	// LeaseDuration, RenewDeadline and RetryPeriod time leader election; see DefaultLeaseDuration.
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// Controllers are the parts to run.
	Controllers []string
	// WatchLabelSelector limits what this instance reconciles to the objects it selects (see
	// package shard); empty reconciles everything. ShardName names the shard in metrics.
	WatchLabelSelector string
	ShardName          string
	// WebhookHost and WebhookPort are where the admission webhook server listens.
	WebhookHost string
	WebhookPort int
	// WebhookCertDir holds tls.crt and tls.key for the webhook server.
	WebhookCertDir string
	// WebhookSelfSigned makes the manager generate a CA and serving certificate into
	// WebhookCertDir, keep the webhook configurations' caBundle in step and renew both before
	// they expire; for clusters without cert-manager and for `siteops dev up`.
	WebhookSelfSigned bool
	// WebhookCertHosts are the DNS names or IPs the self-signed serving certificate is valid for.
	WebhookCertHosts []string
	// WebhookCASecret ("namespace/name") shares the self-signed CA between replicas.
	WebhookCASecret string
	// EventsAddr, when set, is Flux's notification-controller events endpoint: every part's
	// Events are posted there too (package fluxevents).
	EventsAddr string

	// Decofile configures the Decofile delivery part.
	Decofile decofile.Options
	// Tenant configures the tenant cache isolation part.
	Tenant tenant.Options
	// Mirror configures the cluster-to-git mirror part.
	Mirror mirror.Options
	// UI configures the web UI, served by every replica when enabled.
	UI ui.Options
}

// Leader election timing. A standby takes over a leader that died without releasing the Lease
// (killed, its node lost) once the Lease has not been renewed for DefaultLeaseDuration after it
// last saw it renewed, noticed within one jittered retry period (1–2.2 s): the takeover comes
// 10–13.4 s after the leader's last renewal, against 15–19.8 s with controller-runtime's defaults
// (15 s, 10 s, 2 s), which could not meet a 15 s failover goal once the new leader's start-up is
// added. BenchmarkLeaderFailoverGap in internal/mirror measures the whole gap (SIGKILL → the next
// change pushed). A leader that cannot renew for DefaultRenewDeadline stops leading, 3 s before a
// standby may take the Lease. Writes of two leaders overlapping anyway stay safe: status patches
// use optimistic locking and every mirror push is a compare-and-swap on the branch.
const (
	DefaultLeaseDuration = 10 * time.Second
	DefaultRenewDeadline = 7 * time.Second
	DefaultRetryPeriod   = time.Second
)

// DefaultOptions are the options of a production deployment. Each part keeps its defaults next
// to its flags, so they are applied by binding the flags to a throw-away flag set.
func DefaultOptions() Options {
	o := Options{
		MetricsAddr:      ":8080",
		ProbeAddr:        ":8081",
		PprofAddr:        "0",
		LeaderElect:      true,
		LeaderElectionID: "siteops-manager.siteops.dev",
		LeaseDuration:    DefaultLeaseDuration,
		RenewDeadline:    DefaultRenewDeadline,
		RetryPeriod:      DefaultRetryPeriod,
		Controllers:      slices.Clone(Parts),
		WebhookPort:      9443,
		WebhookCertDir:   "/tmp/k8s-webhook-server/serving-certs",
		WebhookCertHosts: []string{"siteops-webhook-service.siteops-system.svc", "siteops-webhook-service.siteops-system.svc.cluster.local"},
	}
	o.BindFlags(pflag.NewFlagSet("defaults", pflag.ContinueOnError))
	return o
}

// BindFlags registers every manager and part flag on fs.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", o.MetricsAddr, `address the metrics endpoint binds to ("0" disables it)`)
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", o.ProbeAddr, "address the health and readiness probes bind to")
	fs.StringVar(&o.PprofAddr, "pprof-bind-address", o.PprofAddr, `address Go's /debug/pprof profiles bind to, unauthenticated: keep it off ("0", the default) or on a port no Service exposes`)
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect, "elect a leader so only one replica runs controllers")
	fs.StringVar(&o.LeaderElectionID, "leader-election-id", o.LeaderElectionID, "name of the leader election Lease")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", o.LeaderElectionNamespace, "namespace of the leader election Lease (default: the manager's namespace)")
	fs.DurationVar(&o.LeaseDuration, "leader-election-lease-duration", o.LeaseDuration, "how long a standby waits after the leader's last renewal before taking the Lease (the failover time after a crash)")
	fs.DurationVar(&o.RenewDeadline, "leader-election-renew-deadline", o.RenewDeadline, "how long the leader keeps trying to renew before it gives up leadership; less than the lease duration")
	fs.DurationVar(&o.RetryPeriod, "leader-election-retry-period", o.RetryPeriod, "how often replicas renew or try to take the Lease")
	fs.StringVar(&o.WatchLabelSelector, "watch-label-selector", o.WatchLabelSelector, "reconcile only the objects this label selector matches (Decofiles by their labels, tenants by their Namespace's, the mirror by the GitTarget's), such as \"sharding.siteops.dev/key=shard1\" for a shard or \"!sharding.siteops.dev/key\" for the main instance beside shards; webhooks and push events are served for every object; empty reconciles everything")
	fs.StringVar(&o.ShardName, "shard-name", o.ShardName, "name of this instance's shard, for the siteops_shard_info metric and logs (empty for the main instance)")
	fs.StringSliceVar(&o.Controllers, "controllers", o.Controllers, "parts to run: "+strings.Join(Parts, ",")+" (v0.11's part names are accepted, see docs/migration.md)")
	fs.StringVar(&o.WebhookHost, "webhook-host", o.WebhookHost, "address the admission webhook server binds to")
	fs.IntVar(&o.WebhookPort, "webhook-port", o.WebhookPort, "port of the admission webhook server")
	fs.StringVar(&o.WebhookCertDir, "webhook-cert-dir", o.WebhookCertDir, "folder with tls.crt and tls.key for the webhook server")
	fs.BoolVar(&o.WebhookSelfSigned, "webhook-self-signed", o.WebhookSelfSigned, "generate and renew a self-signed CA and webhook certificate in --webhook-cert-dir and patch the webhook configurations' caBundle (instead of cert-manager)")
	fs.StringSliceVar(&o.WebhookCertHosts, "webhook-cert-hosts", o.WebhookCertHosts, "DNS names or IPs of the webhook Service, for the self-signed certificate")
	fs.StringVar(&o.EventsAddr, "events-addr", o.EventsAddr, "URL of Flux's notification-controller events endpoint (such as http://notification-controller.flux-system.svc.cluster.local./): every Event is posted there too, for Flux Alerts; empty sends none")
	fs.StringVar(&o.WebhookCASecret, "webhook-ca-secret", o.WebhookCASecret, `Secret ("namespace/name") holding the self-signed CA, shared by all replicas (needed with more than one replica)`)
	fs.StringVar(&o.UI.BindAddress, "ui-bind-address", o.UI.BindAddress, `address the web UI binds to, over TLS, for people an authenticating proxy vouches for or who sign in with OIDC ("0" or empty, the default, turns it off)`)
	fs.StringVar(&o.UI.CertDir, "ui-cert-dir", o.UI.CertDir, "folder with tls.crt and tls.key, the UI's serving certificate (reloaded when renewed)")
	fs.StringVar(&o.UI.ProxyCAFile, "ui-proxy-ca-file", o.UI.ProxyCAFile, "CA certificates the authenticating proxy's client certificate is verified against; only that proxy may reach the UI, and its X-Remote-User and X-Remote-Group headers name the person")
	fs.StringSliceVar(&o.UI.ProxyNames, "ui-proxy-names", o.UI.ProxyNames, "common names accepted on the authenticating proxy's client certificate (empty accepts any the CA signed)")
	fs.StringVar(&o.UI.OIDC.IssuerURL, "ui-oidc-issuer-url", o.UI.OIDC.IssuerURL, "OpenID Connect issuer (https) people sign in to the UI with, directly: no authenticating proxy needed; beside --ui-proxy-ca-file, the proxy's connections still use its headers")
	fs.StringVar(&o.UI.OIDC.ClientID, "ui-oidc-client-id", o.UI.OIDC.ClientID, "the UI's client ID at the OIDC issuer (the audience of its ID tokens)")
	fs.StringVar(&o.UI.OIDC.ClientSecretFile, "ui-oidc-client-secret-file", o.UI.OIDC.ClientSecretFile, "file holding the UI's client secret at the OIDC issuer")
	fs.StringVar(&o.UI.OIDC.RedirectURL, "ui-oidc-redirect-url", o.UI.OIDC.RedirectURL, "https://<the UI's host>/auth/callback, the redirect URL registered at the OIDC issuer")
	fs.StringVar(&o.UI.OIDC.UsernameClaim, "ui-oidc-username-claim", cmp.Or(o.UI.OIDC.UsernameClaim, "email"), "ID token claim naming the person, as the API server's --oidc-username-claim (such as email or sub)")
	fs.StringVar(&o.UI.OIDC.GroupsClaim, "ui-oidc-groups-claim", cmp.Or(o.UI.OIDC.GroupsClaim, "groups"), "ID token claim holding the person's groups, as the API server's --oidc-groups-claim")
	fs.StringVar(&o.UI.OIDC.UsernamePrefix, "ui-oidc-username-prefix", o.UI.OIDC.UsernamePrefix, `prefix of user names, as the API server's --oidc-username-prefix: empty prefixes claims other than email with "<issuer URL>#", "-" prefixes nothing`)
	fs.StringVar(&o.UI.OIDC.GroupsPrefix, "ui-oidc-groups-prefix", o.UI.OIDC.GroupsPrefix, "prefix of group names, as the API server's --oidc-groups-prefix")
	fs.StringVar(&o.UI.OIDC.CookieSecretFile, "ui-oidc-cookie-secret-file", o.UI.OIDC.CookieSecretFile, "file of at least 32 random bytes sealing the UI's session cookies (the same on every replica; a new one signs everyone out)")
	fs.StringVar(&o.UI.OIDC.CAFile, "ui-oidc-ca-file", o.UI.OIDC.CAFile, "CA certificates the OIDC issuer's certificate is verified against (empty: the system's)")
	o.Decofile.BindFlags(fs)
	o.Tenant.BindFlags(fs)
	o.Mirror.BindFlags(fs)
	o.Tenant.BindLegacyFlags(fs)
}

// Deprecations lists one line per v0.11 name in use (environment variables, --controllers
// part names), saying what to use instead; Run logs them.
func (o *Options) Deprecations() []string {
	out := append(o.Decofile.Deprecations(), o.Tenant.Deprecations()...)
	for _, c := range o.Controllers {
		if part, ok := LegacyParts[c]; ok {
			use := "--controllers=" + part
			if part == "" {
				use = "nothing: siteops has no such part (the published operator keeps serving it)"
			}
			out = append(out, fmt.Sprintf("--controllers part %q (published Decofile operator v0.11) is deprecated: use %s", c, use))
		}
	}
	return out
}

// Validate reports option values that cannot work, all at once.
func (o *Options) Validate() error {
	var errs []error
	for _, c := range o.Controllers {
		if _, legacy := LegacyParts[c]; !slices.Contains(Parts, c) && !legacy {
			errs = append(errs, fmt.Errorf("--controllers: unknown part %q (known: %s)", c, strings.Join(Parts, ",")))
		}
	}
	if o.LeaderElect && (o.RetryPeriod <= 0 || o.RenewDeadline <= time.Duration(1.2*float64(o.RetryPeriod)) || o.LeaseDuration <= o.RenewDeadline) {
		errs = append(errs, fmt.Errorf("leader election: want --leader-election-lease-duration (%s) > --leader-election-renew-deadline (%s) > 1.2 × --leader-election-retry-period (%s) > 0", o.LeaseDuration, o.RenewDeadline, o.RetryPeriod))
	}
	if _, err := shard.Parse(o.WatchLabelSelector); err != nil {
		errs = append(errs, err)
	}
	if o.Enabled(PartDecofile) {
		errs = append(errs, o.Decofile.Validate())
	}
	if o.Enabled(PartTenant) {
		errs = append(errs, o.Tenant.Validate())
	}
	if o.Enabled(PartMirror) {
		errs = append(errs, o.Mirror.Validate())
	}
	errs = append(errs, o.UI.Validate())
	return errors.Join(errs...)
}

// tenantWithMirrorReserved returns the tenant options with the mirror's key prefix and ACL user
// reserved: the mirror may share the tenants' Valkey, and no tenant's key patterns may reach its
// cursors and attribution facts.
func (o *Options) tenantWithMirrorReserved() tenant.Options {
	t := o.Tenant
	t.ReservedKeyPrefixes = append(slices.Clone(t.ReservedKeyPrefixes), cmp.Or(o.Mirror.RedisKeyPrefix, store.DefaultKeyPrefix))
	if o.Mirror.RedisUsername != "" {
		t.ReservedUsers = append(slices.Clone(t.ReservedUsers), o.Mirror.RedisUsername)
	}
	return t
}

// Enabled reports whether part is in --controllers.
// A v0.11 part name counts as the siteops part it maps to.
func (o *Options) Enabled(part string) bool {
	return slices.ContainsFunc(o.Controllers, func(c string) bool {
		if p, ok := LegacyParts[c]; ok {
			return p == part && part != ""
		}
		return c == part
	})
}

// CacheOptions is what the manager's cache holds of the objects the parts enabled in o read:
// no managedFields (nothing reads them from the cache; with thousands of objects they are a
// good part of its memory), and Decofiles trimmed as the Decofile part says.
func CacheOptions(o Options) cache.Options {
	co := cache.Options{DefaultTransform: cache.TransformStripManagedFields()}
	if o.Enabled(PartDecofile) {
		decofilecontroller.CacheOptions(&co)
	}
	return co
}

// New builds a manager for cfg with the enabled parts registered.
func New(cfg *rest.Config, o Options) (ctrl.Manager, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	co := CacheOptions(o)
	wo := webhook.Options{Host: o.WebhookHost, Port: o.WebhookPort, CertDir: o.WebhookCertDir}
	if o.Enabled(PartMirror) {
		// The CommitRequest webhook tells the API server by its client certificate.
		wo.TLSOpts = o.Mirror.WebhookTLSOpts()
	}
	webhooks := &webhookServer{Server: webhook.NewServer(wo)}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme.New(),
		Cache:                         co,
		Metrics:                       metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:        o.ProbeAddr,
		PprofBindAddress:              o.PprofAddr,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              o.LeaderElectionID,
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 durationOrNil(o.LeaseDuration),
		RenewDeadline:                 durationOrNil(o.RenewDeadline),
		RetryPeriod:                   durationOrNil(o.RetryPeriod),
		WebhookServer:                 webhooks,
		Controller:                    config.Controller{SkipNameValidation: &o.SecondInProcess},
	})
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	if o.EventsAddr != "" {
		f, err := fluxevents.New(o.EventsAddr, mgr.GetScheme(), ctrl.Log.WithName("flux-events"), 0)
		if err != nil {
			return nil, err
		}
		if mgr, err = fluxevents.Wrap(mgr, f); err != nil {
			return nil, err
		}
	}
	if o.WebhookSelfSigned {
		if err := selfSignedCerts(mgr, cfg, o); err != nil {
			return nil, err
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	// Ready means "serves its webhooks", nothing more: a part's dependencies (Redis, Valkey, S3,
	// git hosts) report through that part's conditions and metrics, so one part's outage never
	// empties the Service of the fail-closed injection webhook.
	if err := mgr.AddReadyzCheck("webhooks", webhooks.readyCheck); err != nil {
		return nil, err
	}
	sel, err := shard.Parse(o.WatchLabelSelector)
	if err != nil {
		return nil, err
	}
	shard.Announce(o.ShardName, sel)
	o.Decofile.Shard, o.Tenant.Shard, o.Mirror.Shard = sel, sel, sel
	setups := map[string]func() error{
		PartDecofile: func() error { return decofile.Setup(mgr, o.Decofile) },
		PartTenant: func() error {
			prover, err := tenant.SetupWithProver(mgr, o.tenantWithMirrorReserved())
			// The overview and namespace pages show the nodes' last isolation proofs.
			o.UI.Proofs = prover
			return err
		},
		PartMirror: func() error {
			eng, err := mirror.SetupWithEngine(mgr, o.mirrorOptions())
			if err != nil {
				return err
			}
			// GitTarget pages show the commits this replica's engine pushed.
			o.UI.Commits = ui.MirrorCommits(eng.Commits())
			// They also list the changes it holds but has not pushed yet.
			o.UI.Pending = ui.MirrorPending(eng.Pending())
			return nil
		},
	}
	for _, part := range Parts {
		if !o.Enabled(part) {
			continue
		}
		if err := setups[part](); err != nil {
			return nil, fmt.Errorf("set up %s part: %w", part, err)
		}
	}
	if err := ui.Setup(mgr, o.UI); err != nil {
		return nil, fmt.Errorf("set up the UI: %w", err)
	}
	return mgr, nil
}

// mirrorOptions are the mirror's options with its writers' stop bounded by half the leader
// lease: a leader stepping down releases the Lease sooner than a crashed one's expires.
func (o Options) mirrorOptions() mirror.Options {
	m := o.Mirror
	if m.StopTimeout == 0 && o.LeaderElect && o.LeaseDuration > 0 {
		m.StopTimeout = o.LeaseDuration / 2
	}
	return m
}

// durationOrNil leaves an unset duration to controller-runtime's default.
func durationOrNil(d time.Duration) *time.Duration {
	if d <= 0 {
		return nil
	}
	return &d
}

// servedWebhookConfigs names the webhook configurations of the webhooks this manager serves: the
// ones the chart creates, and the only ones its certificate rotator may patch.
func (o Options) servedWebhookConfigs() (mutating, validating []string) {
	if o.Enabled(PartDecofile) && !o.Decofile.DisableInjection {
		mutating = append(mutating, inject.MutatingConfigName)
		validating = append(validating, inject.ValidatingConfigName)
	}
	if o.Enabled(PartMirror) && o.Mirror.CommitRequestWebhook {
		validating = append(validating, commitrequest.WebhookConfigName)
	}
	if o.Enabled(PartMirror) && o.Mirror.WatchRuleWebhook {
		validating = append(validating, ruleaccess.WebhookConfigName)
	}
	return mutating, validating
}

// selfSignedCerts writes the webhook certificates before the webhook server starts (it reads
// them on start) and adds the rotator that renews them while the manager runs.
func selfSignedCerts(mgr ctrl.Manager, cfg *rest.Config, o Options) error {
	c, err := client.New(cfg, client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return fmt.Errorf("webhook certificates: %w", err)
	}
	wo := webhookcert.Options{CertDir: o.WebhookCertDir, Hosts: o.WebhookCertHosts}
	if o.WebhookCASecret != "" {
		ns, name, ok := strings.Cut(o.WebhookCASecret, "/")
		if !ok || ns == "" || name == "" {
			return fmt.Errorf("--webhook-ca-secret %q: want namespace/name", o.WebhookCASecret)
		}
		wo.CASecret = types.NamespacedName{Namespace: ns, Name: name}
	}
	wo.MutatingWebhooks, wo.ValidatingWebhooks = o.servedWebhookConfigs()
	r, err := webhookcert.New(c, wo)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := r.Ensure(ctx); err != nil {
		return fmt.Errorf("webhook certificates: %w", err)
	}
	return mgr.Add(r)
}

// Run builds the manager and runs it until ctx is done.
func Run(ctx context.Context, cfg *rest.Config, o Options) error {
	mgr, err := New(cfg, o)
	if err != nil {
		return err
	}
	for _, d := range o.Deprecations() {
		ctrl.Log.WithName("setup").Info("deprecated: " + d)
	}
	ctrl.Log.WithName("setup").Info("starting manager", "controllers", o.Controllers, "leaderElect", o.LeaderElect)
	return mgr.Start(ctx)
}
