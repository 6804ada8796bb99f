// Package tenant wires tenant cache isolation into the manager: per-namespace Valkey/Redis ACL
// users on the master and every replica, kept in sync across Sentinel failover.
package tenant

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/siteops/siteops/internal/mirror/store"
	"github.com/siteops/siteops/internal/shard"
	"github.com/siteops/siteops/internal/tenant/acl"
	"github.com/siteops/siteops/internal/tenant/doctor"
	"github.com/siteops/siteops/internal/tenant/failover"
	"github.com/siteops/siteops/internal/tenant/metrics"
	"github.com/siteops/siteops/internal/tenant/provision"
	"github.com/siteops/siteops/internal/tenant/resync"
	"github.com/siteops/siteops/internal/tenant/rollout"
	"github.com/siteops/siteops/internal/workload"
)

// Environment variables read when the matching flag is not given.
const (
	EnvAdminPassword = "VALKEY_ADMIN_PASSWORD"
	EnvResyncPeriod  = "VALKEY_ACL_RESYNC_PERIOD"
	// EnvPodNamespace is the manager's namespace (the chart sets it from the downward API);
	// Events about refused Valkey nodes are recorded on it.
	EnvPodNamespace = "POD_NAMESPACE"
)

// Environment variables and flags of the published Decofile operator (v0.11), accepted as
// deprecated aliases so its Deployment's settings keep working (docs/migration.md).
const (
	// EnvLegacyURL is --valkey-url.
	EnvLegacyURL = "VALKEY_URL"
	// EnvLegacySentinelURLs is --valkey-sentinel-addrs (comma-separated; host:port or redis:// URLs).
	EnvLegacySentinelURLs = "VALKEY_SENTINEL_URLS"
	// EnvLegacySentinelMaster is --valkey-sentinel-master.
	EnvLegacySentinelMaster = "VALKEY_SENTINEL_MASTER_NAME"
	// EnvLegacyWatchFailover switched v0.11's failover watch; siteops always watches every Sentinel.
	EnvLegacyWatchFailover = "VALKEY_WATCH_FAILOVER"
	// FlagLegacySentinelURLs is the v0.11 name of --valkey-sentinel-addrs.
	FlagLegacySentinelURLs = "valkey-sentinel-urls"
	// FlagLegacyWatchFailover is v0.11's failover-watch switch; siteops always watches.
	FlagLegacyWatchFailover = "valkey-watch-failover"
)

// Defaults.
const (
	DefaultMasterName    = "mymaster"
	DefaultResyncPeriod  = 10 * time.Minute
	DefaultDeleteTimeout = 10 * time.Minute
)

// Options configures the tenant part.
type Options struct {
	// Shard selects the tenants this instance provisions, by their Namespace's labels.
	Shard shard.Selector
	// SentinelAddrs are the Sentinels' host:port addresses; every one is watched for failovers.
	SentinelAddrs []string
	// SentinelMaster is the name the Sentinels monitor the master under.
	SentinelMaster string
	// SentinelUsername and SentinelPassword authenticate to Sentinels that require it (an
	// unauthenticated Sentinel lets anyone re-point its master).
	SentinelUsername, SentinelPassword string
	// AllowedNodes are the data nodes (host:port, IP, CIDR or host name) the operator may
	// connect to; a node a Sentinel reports outside them gets nothing. Empty: the nodes the
	// Sentinels report when the manager starts.
	AllowedNodes []string
	// URL reaches a single node directly, without Sentinel (development).
	URL string
	// AdminUsername and AdminPassword are the credentials used to manage ACL users; the
	// username is reserved for the operator.
	AdminUsername, AdminPassword string
	// TLS turns TLS on for every Valkey and Sentinel connection.
	TLS bool
	// TLSCAFile, when set, is the CA bundle that signs the servers' certificates.
	TLSCAFile string
	// ResyncPeriod is how often every tenant is re-applied on every node.
	ResyncPeriod time.Duration
	// DeleteTimeout bounds how long an unreachable Valkey delays a namespace's deletion.
	DeleteTimeout time.Duration
	// RolloutPoll is how often a password rotation checks whether workloads rolled out.
	RolloutPoll time.Duration
	// RotationMaxGrace bounds how long earlier passwords stay valid while the workloads roll out
	// after a rotation: past it they are removed, even if a workload never rolled out.
	RotationMaxGrace time.Duration
	// ReservedUsers are usernames no tenant may get: the server's replication and Sentinel
	// users and any other name the platform keeps. "default", "lock" and the admin user are
	// always reserved.
	ReservedUsers []string
	// ReservedKeyPrefixes are key prefixes no tenant's key patterns may cover (the manager adds
	// the mirror's --redis-key-prefix); the mirror's default prefix is always reserved.
	ReservedKeyPrefixes []string

	envErr              error
	legacyWatchFailover bool // --valkey-watch-failover, accepted and ignored
}

// BindFlags registers the part's flags. The resync period defaults to VALKEY_ACL_RESYNC_PERIOD
// when set (an unparsable value is reported by Validate); the admin password falls back to
// VALKEY_ADMIN_PASSWORD when used, so it never shows as a flag default in --help.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	if o.SentinelMaster == "" {
		o.SentinelMaster = cmp.Or(os.Getenv(EnvLegacySentinelMaster), DefaultMasterName)
	}
	if o.ResyncPeriod == 0 {
		o.ResyncPeriod = DefaultResyncPeriod
		if v := os.Getenv(EnvResyncPeriod); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				o.envErr = fmt.Errorf("%s=%q is not a positive duration (for example 10m or 90s)", EnvResyncPeriod, v)
			} else {
				o.ResyncPeriod = d
			}
		}
	}
	if o.DeleteTimeout == 0 {
		o.DeleteTimeout = DefaultDeleteTimeout
	}
	if o.RotationMaxGrace == 0 {
		o.RotationMaxGrace = provision.DefaultMaxGrace
	}
	if o.ReservedUsers == nil {
		o.ReservedUsers = slices.Clone(provision.AlwaysReserved)
	}
	fs.StringSliceVar(&o.ReservedUsers, "valkey-acl-reserved-users", o.ReservedUsers, "Valkey usernames no tenant namespace may get, comma-separated (add the replication and Sentinel users); default, lock and --valkey-admin-username are always reserved")
	fs.StringSliceVar(&o.SentinelAddrs, "valkey-sentinel-addrs", o.SentinelAddrs, "Valkey Sentinel host:port addresses, comma-separated (all are watched for failovers)")
	fs.StringVar(&o.SentinelMaster, "valkey-sentinel-master", o.SentinelMaster, "name the Sentinels monitor the Valkey master under")
	fs.StringVar(&o.SentinelUsername, "valkey-sentinel-username", o.SentinelUsername, "username on the Sentinels, when they use ACL users (empty: the default user)")
	fs.StringVar(&o.SentinelPassword, "valkey-sentinel-password", o.SentinelPassword, "password of the Sentinels, when they require one")
	fs.StringSliceVar(&o.AllowedNodes, "valkey-allowed-nodes", o.AllowedNodes, "Valkey masters and replicas the operator may connect to, comma-separated host:port, IPs, CIDRs or host names; a node a Sentinel reports outside them is refused before the admin AUTH (empty: the nodes the Sentinels report at start)")
	fs.StringVar(&o.URL, "valkey-url", o.URL, "redis:// or rediss:// URL of a single Valkey node, instead of Sentinel (development)")
	fs.StringVar(&o.AdminUsername, "valkey-admin-username", o.AdminUsername, "Valkey user that manages tenant ACL users (empty: the default user)")
	fs.StringVar(&o.AdminPassword, "valkey-admin-password", o.AdminPassword, "password of the admin user (env "+EnvAdminPassword+")")
	fs.BoolVar(&o.TLS, "valkey-tls", o.TLS, "use TLS for Valkey and Sentinel connections")
	fs.StringVar(&o.TLSCAFile, "valkey-tls-ca-file", o.TLSCAFile, "CA bundle for Valkey server certificates (default: system roots)")
	fs.DurationVar(&o.ResyncPeriod, "valkey-acl-resync-period", o.ResyncPeriod, "how often every tenant ACL user is re-applied on every node, with jitter (env "+EnvResyncPeriod+")")
	fs.DurationVar(&o.DeleteTimeout, "valkey-acl-delete-timeout", o.DeleteTimeout, "how long an unreachable Valkey may delay removing a namespace's finalizer")
	fs.DurationVar(&o.RotationMaxGrace, "valkey-rotation-max-grace", o.RotationMaxGrace, "longest time earlier passwords stay valid after a rotation (or a lost Secret) while workloads roll out; past it they are removed even if a workload never rolled out")
}

// BindLegacyFlags registers v0.11's flag names that differ from siteops' as hidden, deprecated
// aliases (pflag prints one deprecation line when one is used). --valkey-url,
// --valkey-sentinel-master, --valkey-admin-password and --valkey-acl-resync-period already have
// v0.11's names and meaning.
func (o *Options) BindLegacyFlags(fs *pflag.FlagSet) {
	fs.StringSliceVar(&o.SentinelAddrs, FlagLegacySentinelURLs, o.SentinelAddrs, "alias of --valkey-sentinel-addrs")
	_ = fs.MarkDeprecated(FlagLegacySentinelURLs, "use --valkey-sentinel-addrs")
	fs.BoolVar(&o.legacyWatchFailover, FlagLegacyWatchFailover, true, "ignored: every Sentinel is always watched for failovers")
	_ = fs.MarkDeprecated(FlagLegacyWatchFailover, "siteops always watches every Sentinel for failovers; remove it")
}

// Deprecations lists one line per v0.11 environment variable that is set, saying what to use
// instead; the manager logs them at start.
func (o *Options) Deprecations() []string {
	var out []string
	for _, a := range [][2]string{
		{EnvLegacyURL, "--valkey-url"},
		{EnvLegacySentinelURLs, "--valkey-sentinel-addrs"},
		{EnvLegacySentinelMaster, "--valkey-sentinel-master"},
		{EnvLegacyWatchFailover, "nothing (every Sentinel is always watched for failovers)"},
	} {
		if _, ok := os.LookupEnv(a[0]); ok {
			out = append(out, fmt.Sprintf("environment variable %s (published Decofile operator v0.11) is deprecated: use %s", a[0], a[1]))
		}
	}
	return out
}

// resolved is o with v0.11's VALKEY_URL and VALKEY_SENTINEL_URLS applied where the flags are
// unset. They are read when used, not as flag defaults, so a password in a URL never shows in
// --help.
func (o *Options) resolved() *Options {
	r := *o
	if r.URL == "" {
		r.URL = os.Getenv(EnvLegacyURL)
	}
	if v := os.Getenv(EnvLegacySentinelURLs); len(r.SentinelAddrs) == 0 && v != "" {
		r.SentinelAddrs = splitList(v)
	}
	return &r
}

// Sentinels returns the Sentinel addresses as host:port, taking v0.11's redis:// and rediss://
// URLs too, and the password the first URL carries (used when --valkey-sentinel-password is
// empty).
func (o *Options) Sentinels() (addrs []string, password string, err error) {
	for _, a := range o.SentinelAddrs {
		a = strings.TrimSpace(a)
		if !strings.Contains(a, "://") {
			addrs = append(addrs, a)
			continue
		}
		u, perr := url.Parse(a)
		if perr != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
			// The URL may carry a password: name it by position only.
			return nil, "", fmt.Errorf("tenant part: Sentinel address %d is not host:port nor a redis:// or rediss:// URL", len(addrs)+1)
		}
		if p, ok := u.User.Password(); ok && password == "" {
			password = p
		}
		addrs = append(addrs, u.Host)
	}
	return addrs, password, nil
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Validate reports flag values that cannot work.
func (o *Options) Validate() error {
	o = o.resolved()
	errs := []error{o.envErr}
	if v, ok := os.LookupEnv(EnvLegacyWatchFailover); ok {
		if _, err := strconv.ParseBool(v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q is not a boolean", EnvLegacyWatchFailover, v))
		}
	}
	if _, _, err := o.Sentinels(); err != nil {
		errs = append(errs, err)
	}
	if len(o.SentinelAddrs) == 0 && o.URL == "" {
		errs = append(errs, errors.New("tenant part: set --valkey-sentinel-addrs (or --valkey-url for a single node), or leave \"tenant\" out of --controllers"))
	}
	if len(o.SentinelAddrs) > 0 && o.URL != "" {
		errs = append(errs, errors.New("tenant part: --valkey-sentinel-addrs and --valkey-url exclude each other"))
	}
	if len(o.SentinelAddrs) > 0 && o.SentinelMaster == "" {
		errs = append(errs, errors.New("tenant part: --valkey-sentinel-master must not be empty"))
	}
	if o.ResyncPeriod <= 0 {
		errs = append(errs, fmt.Errorf("tenant part: --valkey-acl-resync-period must be positive, got %s", o.ResyncPeriod))
	}
	if o.DeleteTimeout <= 0 {
		errs = append(errs, fmt.Errorf("tenant part: --valkey-acl-delete-timeout must be positive, got %s", o.DeleteTimeout))
	}
	if o.RotationMaxGrace <= 0 {
		errs = append(errs, fmt.Errorf("tenant part: --valkey-rotation-max-grace must be positive (a leaked password must stop working at some point), got %s", o.RotationMaxGrace))
	}
	if _, err := acl.ParseAllowList(o.AllowedNodes); err != nil {
		errs = append(errs, fmt.Errorf("tenant part: --valkey-allowed-nodes: %w", err))
	}
	if o.TLSCAFile != "" && !o.TLS {
		errs = append(errs, errors.New("tenant part: --valkey-tls-ca-file needs --valkey-tls"))
	}
	return errors.Join(errs...)
}

// Reserved returns every username no tenant may get: the flag's list, the admin user and
// AlwaysReserved.
func (o *Options) Reserved() []string {
	out := slices.Clone(o.ReservedUsers)
	for _, u := range append(slices.Clone(provision.AlwaysReserved), o.AdminUsername) {
		if u != "" && !slices.Contains(out, u) {
			out = append(out, u)
		}
	}
	return out
}

// ReservedPrefixes returns every key prefix no tenant's key patterns may cover:
// ReservedKeyPrefixes and the mirror's default prefix.
func (o *Options) ReservedPrefixes() []string {
	out := slices.Clone(o.ReservedKeyPrefixes)
	if !slices.Contains(out, store.DefaultKeyPrefix) {
		out = append(out, store.DefaultKeyPrefix)
	}
	return out
}

// NodeConfig returns the node-set configuration the options describe.
func (o *Options) NodeConfig() (acl.Config, error) {
	o = o.resolved()
	sentinels, urlPassword, err := o.Sentinels()
	if err != nil {
		return acl.Config{}, err
	}
	cfg := acl.Config{
		SentinelAddrs: sentinels, MasterName: o.SentinelMaster,
		SentinelUsername: o.SentinelUsername, SentinelPassword: cmp.Or(o.SentinelPassword, urlPassword),
		URL: o.URL, Username: o.AdminUsername, Password: o.AdminPassword, AllowedNodes: o.AllowedNodes,
	}
	if cfg.Password == "" {
		cfg.Password = os.Getenv(EnvAdminPassword)
	}
	if o.TLS {
		cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		if o.TLSCAFile != "" {
			pem, err := os.ReadFile(o.TLSCAFile)
			if err != nil {
				return cfg, fmt.Errorf("read --valkey-tls-ca-file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return cfg, fmt.Errorf("--valkey-tls-ca-file %s holds no PEM certificate", o.TLSCAFile)
			}
			cfg.TLS.RootCAs = pool
		}
	}
	return cfg, nil
}

// Setup registers the namespace controller, the Sentinel watcher and the periodic resync.
func Setup(mgr ctrl.Manager, o Options) error {
	_, err := SetupWithProver(mgr, o)
	return err
}

// SetupWithProver is Setup, returning the prover whose Last proofs an operator's view shows.
func SetupWithProver(mgr ctrl.Manager, o Options) (*resync.Prover, error) {
	prover := &resync.Prover{}
	return prover, setup(mgr, o, prover)
}

func setup(mgr ctrl.Manager, o Options, prover *resync.Prover) error {
	o = *o.resolved()
	if o.RotationMaxGrace == 0 {
		// Options made without BindFlags; a 0 given as the flag is refused by Validate first.
		o.RotationMaxGrace = provision.DefaultMaxGrace
	}
	if err := o.Validate(); err != nil {
		return err
	}
	cfg, err := o.NodeConfig()
	if err != nil {
		return err
	}
	events := mgr.GetEventRecorder("siteops-tenant")
	cfg.OnUntrusted = (&resync.UntrustedReporter{Events: events, Namespace: cmp.Or(os.Getenv(EnvPodNamespace), "default")}).Report
	nodes, err := acl.New(cfg)
	if err != nil {
		return fmt.Errorf("tenant part: %w", err)
	}
	if len(cfg.SentinelAddrs) > 0 && nodes.AllowList().Pinning() {
		mgr.GetLogger().Info("no --valkey-allowed-nodes: the tenant part trusts only the Valkey nodes the Sentinels report at its first discovery; set the flag so a node that moves or is added later is accepted")
	}
	secrets, err := provision.SecretCache(mgr)
	if err != nil {
		return err
	}
	poll := o.RolloutPoll
	if poll == 0 {
		poll = 10 * time.Second
	}
	// One guard per user and uncached namespace reads keep a resync round from applying state
	// that the controller has just replaced (a rotation, an opt-out), without a lock that one
	// tenant's work could hold against the others.
	guard := &resync.Guard{}
	prover.Nodes, prover.Events = nodes, events
	r := &provision.Reconciler{
		Client:              mgr.GetClient(),
		Reader:              mgr.GetAPIReader(),
		Nodes:               nodes,
		Prover:              prover,
		Roller:              &rollout.Roller{Workloads: workload.Lister{Reader: mgr.GetAPIReader()}, Writer: mgr.GetClient()},
		Events:              events,
		ReservedUsers:       o.Reserved(),
		ReservedKeyPrefixes: o.ReservedPrefixes(),
		DeleteTimeout:       o.DeleteTimeout,
		RolloutPoll:         poll,
		MaxGrace:            o.RotationMaxGrace,
		Guard:               guard,
		Shard:               o.Shard,
	}
	if err := r.SetupWithManager(mgr, secrets); err != nil {
		return fmt.Errorf("set up tenant namespace controller: %w", err)
	}
	lister := &provision.TenantLister{Namespaces: mgr.GetAPIReader(), Shard: o.Shard, ReservedUsers: o.Reserved(), ReservedKeyPrefixes: o.ReservedPrefixes(), Events: events}
	syncer := &resync.Syncer{Nodes: nodes, Tenants: lister.List, Prover: prover, Events: events, Guard: guard}
	if err := mgr.Add(&resync.Periodic{Syncer: syncer, Period: o.ResyncPeriod, JitterFactor: 0.1}); err != nil {
		return fmt.Errorf("add periodic tenant resync: %w", err)
	}
	settingsReporter := &doctor.Reporter{Nodes: nodes, Events: events, Namespace: cmp.Or(os.Getenv(EnvPodNamespace), "default"), Period: o.ResyncPeriod}
	if err := mgr.Add(settingsReporter); err != nil {
		return fmt.Errorf("add Valkey settings check: %w", err)
	}
	if len(cfg.SentinelAddrs) > 0 {
		w := &failover.Watcher{
			Sentinels: cfg.SentinelAddrs, MasterName: o.SentinelMaster, Client: nodes.SentinelClient,
			Resyncer: syncer, Failovers: metrics.Failovers, Events: events, Namespace: cmp.Or(os.Getenv(EnvPodNamespace), "default"),
		}
		if err := mgr.Add(w); err != nil {
			return fmt.Errorf("add Sentinel watcher: %w", err)
		}
	}
	return nil
}
