// Package tenant wires tenant cache isolation into the manager: per-namespace Valkey/Redis ACL
// users on the master and every replica, kept in sync across Sentinel failover.
package tenant

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/siteops/siteops/internal/tenant/acl"
	"github.com/siteops/siteops/internal/tenant/failover"
	"github.com/siteops/siteops/internal/tenant/metrics"
	"github.com/siteops/siteops/internal/tenant/provision"
	"github.com/siteops/siteops/internal/tenant/resync"
	"github.com/siteops/siteops/internal/tenant/rollout"
)

// Environment variables read when the matching flag is not given.
const (
	EnvAdminPassword = "VALKEY_ADMIN_PASSWORD"
	EnvResyncPeriod  = "VALKEY_ACL_RESYNC_PERIOD"
)

// Defaults.
const (
	DefaultMasterName    = "mymaster"
	DefaultResyncPeriod  = 10 * time.Minute
	DefaultDeleteTimeout = 10 * time.Minute
)

// Options configures the tenant part.
type Options struct {
	// SentinelAddrs are the Sentinels' host:port addresses; every one is watched for failovers.
	SentinelAddrs []string
	// SentinelMaster is the name the Sentinels monitor the master under.
	SentinelMaster string
	// SentinelPassword authenticates to Sentinels that require it.
	SentinelPassword string
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
	// ReservedUsers are usernames no tenant may get: the server's replication and Sentinel
	// users and any other name the platform keeps. "default", "lock" and the admin user are
	// always reserved.
	ReservedUsers []string

	envErr error
}

// BindFlags registers the part's flags. The resync period defaults to VALKEY_ACL_RESYNC_PERIOD
// when set (an unparsable value is reported by Validate); the admin password falls back to
// VALKEY_ADMIN_PASSWORD when used, so it never shows as a flag default in --help.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	if o.SentinelMaster == "" {
		o.SentinelMaster = DefaultMasterName
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
	if o.ReservedUsers == nil {
		o.ReservedUsers = slices.Clone(provision.AlwaysReserved)
	}
	fs.StringSliceVar(&o.ReservedUsers, "valkey-acl-reserved-users", o.ReservedUsers, "Valkey usernames no tenant namespace may get, comma-separated (add the replication and Sentinel users); default, lock and --valkey-admin-username are always reserved")
	fs.StringSliceVar(&o.SentinelAddrs, "valkey-sentinel-addrs", o.SentinelAddrs, "Valkey Sentinel host:port addresses, comma-separated (all are watched for failovers)")
	fs.StringVar(&o.SentinelMaster, "valkey-sentinel-master", o.SentinelMaster, "name the Sentinels monitor the Valkey master under")
	fs.StringVar(&o.SentinelPassword, "valkey-sentinel-password", o.SentinelPassword, "password of the Sentinels, when they require one")
	fs.StringVar(&o.URL, "valkey-url", o.URL, "redis:// or rediss:// URL of a single Valkey node, instead of Sentinel (development)")
	fs.StringVar(&o.AdminUsername, "valkey-admin-username", o.AdminUsername, "Valkey user that manages tenant ACL users (empty: the default user)")
	fs.StringVar(&o.AdminPassword, "valkey-admin-password", o.AdminPassword, "password of the admin user (env "+EnvAdminPassword+")")
	fs.BoolVar(&o.TLS, "valkey-tls", o.TLS, "use TLS for Valkey and Sentinel connections")
	fs.StringVar(&o.TLSCAFile, "valkey-tls-ca-file", o.TLSCAFile, "CA bundle for Valkey server certificates (default: system roots)")
	fs.DurationVar(&o.ResyncPeriod, "valkey-acl-resync-period", o.ResyncPeriod, "how often every tenant ACL user is re-applied on every node, with jitter (env "+EnvResyncPeriod+")")
	fs.DurationVar(&o.DeleteTimeout, "valkey-acl-delete-timeout", o.DeleteTimeout, "how long an unreachable Valkey may delay removing a namespace's finalizer")
}

// Validate reports flag values that cannot work.
func (o *Options) Validate() error {
	errs := []error{o.envErr}
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

// NodeConfig returns the node-set configuration the options describe.
func (o *Options) NodeConfig() (acl.Config, error) {
	cfg := acl.Config{
		SentinelAddrs: o.SentinelAddrs, MasterName: o.SentinelMaster, SentinelPassword: o.SentinelPassword,
		URL: o.URL, Username: o.AdminUsername, Password: o.AdminPassword,
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
	if err := o.Validate(); err != nil {
		return err
	}
	cfg, err := o.NodeConfig()
	if err != nil {
		return err
	}
	nodes, err := acl.New(cfg)
	if err != nil {
		return fmt.Errorf("tenant part: %w", err)
	}
	secrets, err := provision.SecretCache(mgr)
	if err != nil {
		return err
	}
	poll := o.RolloutPoll
	if poll == 0 {
		poll = 10 * time.Second
	}
	events := mgr.GetEventRecorder("siteops-tenant")
	// One lock and uncached namespace reads keep a resync round from applying state that the
	// controller has just replaced (a rotation, an opt-out).
	applyLock := &sync.Mutex{}
	prover := &resync.Prover{Nodes: nodes, Events: events}
	r := &provision.Reconciler{
		Client:        mgr.GetClient(),
		Reader:        mgr.GetAPIReader(),
		Nodes:         nodes,
		Prover:        prover,
		Roller:        &rollout.Roller{Reader: mgr.GetAPIReader(), Writer: mgr.GetClient()},
		Events:        events,
		ReservedUsers: o.Reserved(),
		DeleteTimeout: o.DeleteTimeout,
		RolloutPoll:   poll,
		ApplyLock:     applyLock,
	}
	if err := r.SetupWithManager(mgr, secrets); err != nil {
		return fmt.Errorf("set up tenant namespace controller: %w", err)
	}
	lister := &provision.TenantLister{Namespaces: mgr.GetAPIReader(), ReservedUsers: o.Reserved(), Events: events}
	syncer := &resync.Syncer{Nodes: nodes, Tenants: lister.List, Prover: prover, Events: events, Lock: applyLock}
	if err := mgr.Add(&resync.Periodic{Syncer: syncer, Period: o.ResyncPeriod, JitterFactor: 0.1}); err != nil {
		return fmt.Errorf("add periodic tenant resync: %w", err)
	}
	if len(o.SentinelAddrs) > 0 {
		w := &failover.Watcher{
			Sentinels: o.SentinelAddrs, MasterName: o.SentinelMaster, Client: nodes.SentinelClient,
			Resyncer: syncer, Failovers: metrics.Failovers,
		}
		if err := mgr.Add(w); err != nil {
			return fmt.Errorf("add Sentinel watcher: %w", err)
		}
	}
	return nil
}
