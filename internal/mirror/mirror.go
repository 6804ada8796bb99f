// Package mirror wires the cluster-to-git mirror into the manager: watched resources committed to
// git as clean YAML, with durable watch resume cursors in Redis.
package mirror

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/siteops/siteops/internal/egress"
	"github.com/siteops/siteops/internal/mirror/attribution"
	"github.com/siteops/siteops/internal/mirror/clientauth"
	"github.com/siteops/siteops/internal/mirror/commitrequest"
	"github.com/siteops/siteops/internal/mirror/controller"
	"github.com/siteops/siteops/internal/mirror/engine"
	"github.com/siteops/siteops/internal/mirror/gitwriter"
	"github.com/siteops/siteops/internal/mirror/ruleaccess"
	"github.com/siteops/siteops/internal/mirror/secretcrypt"
	"github.com/siteops/siteops/internal/mirror/store"
	"github.com/siteops/siteops/internal/shard"
)

// Options configures the mirror part.
type Options struct {
	// Shard selects the GitTargets this instance mirrors (their rules, CommitRequests and
	// GitProviders follow); set by the manager from --watch-label-selector.
	Shard shard.Selector
	// RedisAddr is host:port of the Redis/Valkey server holding the watch resume cursors. Empty
	// (and no RedisSentinelAddrs) runs without durable cursors (every restart replays), which
	// only suits local development.
	RedisAddr string
	// RedisSentinelAddrs, instead of RedisAddr, are Sentinels monitoring that server as
	// RedisSentinelMaster: the mirror follows its master across failovers.
	RedisSentinelAddrs []string
	// RedisSentinelMaster is the name the Sentinels monitor the server under.
	RedisSentinelMaster string
	// RedisSentinelUsername and RedisSentinelPassword authenticate to the Sentinels
	// (RedisSentinelPassword defaults to $REDIS_SENTINEL_PASSWORD).
	RedisSentinelUsername, RedisSentinelPassword string
	// RedisUsername and RedisPassword authenticate to it (RedisPassword defaults to $REDIS_PASSWORD).
	RedisUsername string
	RedisPassword string
	// RedisDB is the logical database.
	RedisDB int
	// RedisTLS connects over TLS.
	RedisTLS bool
	// RedisKeyPrefix is the root of every key; see store.ValidateKeyPrefix. Empty in code means
	// store.DefaultKeyPrefix; an explicitly empty --redis-key-prefix is rejected.
	RedisKeyPrefix string
	// Attribution configures commit authors from audit events (--author-attribution, …).
	Attribution attribution.Options
	// CommitRequestWebhook serves the admission webhook that records who submits each
	// CommitRequest (needs RedisAddr and the manager's webhook server certificate). The flag
	// defaults to on; code that builds a manager without a webhook server leaves it off.
	CommitRequestWebhook bool
	// CommitRequestWebhookClientCA makes the CommitRequest webhook accept only callers with a
	// client certificate of this CA bundle named in CommitRequestWebhookClientNames: the API
	// server, given a client certificate with an AdmissionConfiguration kubeconfig. Required
	// while the webhook is served: the webhook fails closed.
	CommitRequestWebhookClientCA string
	// CommitRequestWebhookClientNames are the accepted client certificate names (common name or
	// DNS name).
	CommitRequestWebhookClientNames []string
	// WatchRuleWebhook serves the admission webhook that refuses a WatchRule or ClusterWatchRule
	// selecting resources its author may not list and watch (ruleaccess). The flag defaults to
	// on; code that builds a manager without a webhook server leaves it off.
	WatchRuleWebhook bool
	// GitAllowedSchemes are the URL schemes GitProviders may use; empty means https and ssh.
	GitAllowedSchemes []string
	// GitAllowedHosts are hosts, host:port pairs, IPs and CIDRs the mirror may push to even when
	// loopback, link-local or private (an internal git host).
	GitAllowedHosts []string
	// GitAllowPrivateNetworks lets the mirror reach private networks (RFC 1918, fc00::/7,
	// 100.64.0.0/10); loopback and link-local stay refused unless in GitAllowedHosts.
	GitAllowPrivateNetworks bool
	// GitMaxFetchBytes bounds the bytes a git remote may send in one fetch or push; 0 means
	// gitwriter.DefaultMaxFetchBytes.
	GitMaxFetchBytes int64
	// GitMaxFetchObjectBytes bounds the inflated size of the objects one fetch stores in memory;
	// 0 means gitwriter.DefaultMaxFetchObjectBytes.
	GitMaxFetchObjectBytes int64
	// GitMaxSweepEntries bounds the files and folders one sweep looks at in a target's folder;
	// 0 means gitwriter.DefaultMaxSweepEntries.
	GitMaxSweepEntries int
	// GitMaxSweepChanges bounds the files one sweep removes; 0 means
	// gitwriter.DefaultMaxSweepChanges.
	GitMaxSweepChanges int
	// ClusterName names this cluster in every commit's Cluster trailer; empty leaves it out.
	ClusterName string
	// UnattributedAuthor ("Name <email>") authors the changes author attribution found no audit
	// fact for, instead of the GitProvider's committer; empty keeps the committer.
	UnattributedAuthor string
	// SecretHashKeySecret ("namespace/name") holds the key of the HMACs that recognise unchanged
	// Secrets of GitTargets writing Secrets encrypted; created when missing. Empty keeps a random
	// key per process: after a restart every such Secret is re-encrypted once.
	SecretHashKeySecret string
	// StopTimeout bounds the last push of each git writer when the mirror stops (the leader
	// steps down or the process ends); writers stop in parallel, so it bounds the mirror's
	// shutdown too. Changes not pushed by then are replayed by the next leader from the
	// cursors. 0 means gitwriter.DefaultStopTimeout; the manager sets half the leader lease, so
	// a leader stepping down hands over sooner than a crashed one is taken over.
	StopTimeout time.Duration

	flags *pflag.FlagSet
}

// EgressSettings name the flags of the mirror's URL policy, for the messages of refusals.
var EgressSettings = egress.Settings{Hosts: "--git-allowed-hosts", Private: "--git-allow-private-networks", Schemes: "--git-allowed-schemes"}

// egressPolicy is the policy every connection to a GitProvider's URL goes through: GitProviders
// are written by tenants, so their URLs are input, never a destination the manager trusts.
func (o *Options) egressPolicy() (*egress.Policy, error) {
	p, err := egress.New(egress.Config{Schemes: o.GitAllowedSchemes, Hosts: o.GitAllowedHosts, AllowPrivate: o.GitAllowPrivateNetworks, Settings: EgressSettings})
	if err != nil {
		return nil, fmt.Errorf("--git-allowed-schemes / --git-allowed-hosts: %w", err)
	}
	return p, nil
}

// BindFlags registers the part's flags.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	if o.RedisKeyPrefix == "" {
		o.RedisKeyPrefix = store.DefaultKeyPrefix
	}
	o.flags = fs
	fs.StringVar(&o.RedisAddr, "redis-addr", o.RedisAddr, "mirror: host:port of the Redis/Valkey server holding the watch resume cursors (without it, or --redis-sentinel-addrs, every restart replays)")
	fs.StringSliceVar(&o.RedisSentinelAddrs, "redis-sentinel-addrs", o.RedisSentinelAddrs, "mirror: host:port of Sentinels monitoring that server, instead of --redis-addr: the mirror follows its master across failovers")
	if o.RedisSentinelMaster == "" {
		o.RedisSentinelMaster = "mymaster"
	}
	fs.StringVar(&o.RedisSentinelMaster, "redis-sentinel-master", o.RedisSentinelMaster, "mirror: name the Sentinels of --redis-sentinel-addrs monitor the server under")
	fs.StringVar(&o.RedisSentinelUsername, "redis-sentinel-username", o.RedisSentinelUsername, "mirror: username on those Sentinels, when they use ACL users (empty: the default user)")
	fs.StringVar(&o.RedisSentinelPassword, "redis-sentinel-password", o.RedisSentinelPassword, "mirror: password of those Sentinels, when they require one (default $REDIS_SENTINEL_PASSWORD)")
	fs.StringVar(&o.RedisUsername, "redis-username", o.RedisUsername, "mirror: Redis ACL user name")
	fs.StringVar(&o.RedisPassword, "redis-password", o.RedisPassword, "mirror: Redis password (default $REDIS_PASSWORD)")
	fs.IntVar(&o.RedisDB, "redis-db", o.RedisDB, "mirror: Redis logical database")
	fs.BoolVar(&o.RedisTLS, "redis-tls", o.RedisTLS, "mirror: connect to Redis over TLS")
	fs.StringVar(&o.RedisKeyPrefix, "redis-key-prefix", o.RedisKeyPrefix, "mirror: root of every Redis key, so installations can share a server")
	fs.BoolVar(&o.CommitRequestWebhook, "commitrequest-webhook", true, "mirror: serve the admission webhook that records who submits each CommitRequest, its commit author (needs --redis-addr and the webhook server certificate)")
	fs.BoolVar(&o.WatchRuleWebhook, "watchrule-webhook", true, "mirror: serve the admission webhook that refuses WatchRules and ClusterWatchRules selecting resources their author may not list and watch")
	if o.CommitRequestWebhookClientNames == nil {
		o.CommitRequestWebhookClientNames = []string{"kube-apiserver"}
	}
	fs.StringVar(&o.CommitRequestWebhookClientCA, "commitrequest-webhook-client-ca", o.CommitRequestWebhookClientCA, "mirror: PEM bundle of the API server's admission client certificate; the CommitRequest webhook refuses callers without an accepted certificate, and the manager does not start the webhook without it (see docs/mirror.md)")
	fs.StringSliceVar(&o.CommitRequestWebhookClientNames, "commitrequest-webhook-client-names", o.CommitRequestWebhookClientNames, "mirror: client certificate names (common name or DNS name) the CommitRequest webhook accepts from --commitrequest-webhook-client-ca")
	if len(o.GitAllowedSchemes) == 0 {
		o.GitAllowedSchemes = slices.Clone(egress.DefaultSchemes)
	}
	fs.StringSliceVar(&o.GitAllowedSchemes, "git-allowed-schemes", o.GitAllowedSchemes, "mirror: URL schemes GitProviders may use (https, ssh, http)")
	fs.StringSliceVar(&o.GitAllowedHosts, "git-allowed-hosts", o.GitAllowedHosts, "mirror: hosts, host:port pairs, IPs and CIDRs the mirror may reach even when loopback, link-local or private (an internal git host)")
	fs.BoolVar(&o.GitAllowPrivateNetworks, "git-allow-private-networks", o.GitAllowPrivateNetworks, "mirror: let GitProviders reach private networks (RFC 1918, fc00::/7, 100.64.0.0/10); loopback and link-local stay refused")
	fs.Int64Var(&o.GitMaxFetchBytes, "git-max-fetch-bytes", orDefault(o.GitMaxFetchBytes, gitwriter.DefaultMaxFetchBytes), "mirror: most bytes a git remote may send in one fetch or push; past it the exchange stops (GitTarget reason FetchTooLarge)")
	fs.Int64Var(&o.GitMaxFetchObjectBytes, "git-max-fetch-object-bytes", orDefault(o.GitMaxFetchObjectBytes, gitwriter.DefaultMaxFetchObjectBytes), "mirror: most bytes the objects of one fetch may take once inflated in memory; a larger pack is refused before it is inflated (GitTarget reason FetchTooLarge)")
	fs.IntVar(&o.GitMaxSweepEntries, "git-max-sweep-entries", int(orDefault(int64(o.GitMaxSweepEntries), gitwriter.DefaultMaxSweepEntries)), "mirror: most files and folders the sweep after a full replay looks at in a target's folder (a folder met twice counts twice); a larger folder is not swept (GitTarget reason TargetTooLarge)")
	fs.IntVar(&o.GitMaxSweepChanges, "git-max-sweep-changes", int(orDefault(int64(o.GitMaxSweepChanges), gitwriter.DefaultMaxSweepChanges)), "mirror: most files the sweep after a full replay removes from a target's folder in one commit; a sweep that would remove more is not made (GitTarget reason TargetTooLarge)")
	fs.StringVar(&o.ClusterName, "cluster-name", o.ClusterName, "mirror: name of this cluster in every commit's Cluster trailer (empty leaves the trailer out)")
	fs.StringVar(&o.UnattributedAuthor, "unattributed-author", o.UnattributedAuthor, `mirror: "Name <email>" authoring changes author attribution found no audit fact for (Attribution: absent), instead of the GitProvider's committer; needs --author-attribution`)
	fs.StringVar(&o.SecretHashKeySecret, "secret-hash-key-secret", o.SecretHashKeySecret, `mirror: Secret ("namespace/name", created when missing) holding the key that recognises unchanged Secrets of GitTargets with spec.secrets.mode Encrypt, so they are not re-encrypted after a restart`)
	o.Attribution.BindFlags(fs)
}

// secretHashKeyRef parses --secret-hash-key-secret.
func (o *Options) secretHashKeyRef() (types.NamespacedName, error) {
	if o.SecretHashKeySecret == "" {
		return types.NamespacedName{}, nil
	}
	ns, name, ok := strings.Cut(o.SecretHashKeySecret, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("--secret-hash-key-secret %q: want namespace/name", o.SecretHashKeySecret)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

// orDefault is v when set, else d (a flag's default shows in --help and the chart's docs).
func orDefault(v, d int64) int64 {
	if v > 0 {
		return v
	}
	return d
}

// Validate reports flag values that cannot work.
func (o *Options) Validate() error {
	var errs []error
	if o.RedisDB < 0 {
		errs = append(errs, fmt.Errorf("--redis-db %d: must be 0 or more", o.RedisDB))
	}
	prefix := o.RedisKeyPrefix
	if prefix == "" && (o.flags == nil || !o.flags.Changed("redis-key-prefix")) {
		prefix = store.DefaultKeyPrefix
	}
	if _, err := store.ValidateKeyPrefix(prefix); err != nil {
		errs = append(errs, fmt.Errorf("--redis-key-prefix: %w", err))
	}
	if err := o.Attribution.Validate(); err != nil {
		errs = append(errs, err)
	}
	if _, err := o.secretHashKeyRef(); err != nil {
		errs = append(errs, err)
	}
	if _, err := o.egressPolicy(); err != nil {
		errs = append(errs, err)
	}
	if o.GitMaxFetchBytes < 0 || o.GitMaxFetchObjectBytes < 0 {
		errs = append(errs, errors.New("--git-max-fetch-bytes and --git-max-fetch-object-bytes must be positive"))
	}
	if o.GitMaxSweepEntries < 0 || o.GitMaxSweepChanges < 0 {
		errs = append(errs, errors.New("--git-max-sweep-entries and --git-max-sweep-changes must be positive"))
	}
	if err := o.commitRequestWebhookAuth(); err != nil {
		errs = append(errs, err)
	}
	if o.CommitRequestWebhookClientCA != "" && len(o.CommitRequestWebhookClientNames) == 0 {
		errs = append(errs, errors.New("--commitrequest-webhook-client-ca needs --commitrequest-webhook-client-names: any certificate of the CA would be accepted otherwise"))
	}
	if _, err := o.unattributedAuthor(); err != nil {
		errs = append(errs, err)
	}
	if o.Attribution.Enabled && !o.redisConfigured() {
		errs = append(errs, errors.New("--author-attribution needs --redis-addr (or --redis-sentinel-addrs): the audit facts are kept in Redis"))
	}
	if o.RedisAddr != "" && len(o.RedisSentinelAddrs) > 0 {
		errs = append(errs, errors.New("--redis-addr and --redis-sentinel-addrs both name the mirror's Redis: set one (with Sentinels, the master they name is used)"))
	}
	return errors.Join(errs...)
}

// redisConfigured reports whether the mirror has a Redis, directly or through Sentinels.
func (o *Options) redisConfigured() bool {
	return o.RedisAddr != "" || len(o.RedisSentinelAddrs) > 0
}

// commitRequestWebhookServed reports whether the CommitRequest webhook is served: it is on and
// has Redis to keep its records in.
func (o *Options) commitRequestWebhookServed() bool {
	return o.CommitRequestWebhook && o.redisConfigured()
}

// commitRequestWebhookAuth refuses a served CommitRequest webhook without a client CA: anyone
// who reaches the webhook port could otherwise record the author of any CommitRequest not yet
// recorded.
func (o *Options) commitRequestWebhookAuth() error {
	if !o.commitRequestWebhookServed() || o.CommitRequestWebhookClientCA != "" {
		return nil
	}
	return errors.New("--commitrequest-webhook needs --commitrequest-webhook-client-ca: without it any caller that reaches the webhook port could record who submitted a CommitRequest (its commit author). " +
		"Set --commitrequest-webhook-client-ca to the CA of the API server's admission client certificate (docs/mirror.md), or --commitrequest-webhook=false to have CommitRequests committed by the committer")
}

// WebhookTLSOpts are the TLS settings the mirror needs from the manager's webhook server: it asks
// callers for a client certificate (without requiring one: other webhooks share the server)
// while the CommitRequest webhook checks them.
func (o *Options) WebhookTLSOpts() []func(*tls.Config) {
	if !o.commitRequestWebhookServed() || o.CommitRequestWebhookClientCA == "" {
		return nil
	}
	return []func(*tls.Config){clientauth.RequestClientCert}
}

// unattributedAuthor parses --unattributed-author; nil when it is not set.
func (o *Options) unattributedAuthor() (*gitwriter.Signature, error) {
	if o.UnattributedAuthor == "" {
		return nil, nil
	}
	if !o.Attribution.Enabled {
		return nil, errors.New("--unattributed-author needs --author-attribution: without it no change is attributed, so none is unattributed")
	}
	sig, err := gitwriter.ParseSignature(o.UnattributedAuthor)
	if err != nil {
		return nil, fmt.Errorf("--unattributed-author: %w", err)
	}
	return &sig, nil
}

// storeConfig is the Redis store configuration. The password falls back to $REDIS_PASSWORD here,
// not as a flag default, so it never shows in --help.
func (o *Options) storeConfig() store.RedisStoreConfig {
	password := o.RedisPassword
	if password == "" {
		password = os.Getenv("REDIS_PASSWORD")
	}
	sentinelPassword := o.RedisSentinelPassword
	if sentinelPassword == "" {
		sentinelPassword = os.Getenv("REDIS_SENTINEL_PASSWORD")
	}
	return store.RedisStoreConfig{Addr: o.RedisAddr, Username: o.RedisUsername, AuthValue: password, DB: o.RedisDB, TLSEnabled: o.RedisTLS, KeyPrefix: o.RedisKeyPrefix,
		SentinelAddrs: o.RedisSentinelAddrs, SentinelMaster: o.RedisSentinelMaster, SentinelUsername: o.RedisSentinelUsername, SentinelPassword: sentinelPassword}
}

// Setup registers the part's controllers, its engine (run by the leader only) and a readiness
// check that pings Redis.
func Setup(mgr ctrl.Manager, o Options) error {
	_, err := SetupWithEngine(mgr, o)
	return err
}

// SetupWithEngine is Setup returning the engine: for the manager, which hands the engine's
// commit record (Engine.Commits) to the UI, and for tests and benchmarks that adjust it.
func SetupWithEngine(mgr ctrl.Manager, o Options) (*engine.Engine, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	// Without Redis the mirror still runs, but every restart replays and sweeps; GitTargets say
	// so in their CursorsDurable condition. Production deployments set --redis-addr.
	var cursors engine.CursorStore
	var redisStore *store.RedisStore
	log := ctrl.Log.WithName("mirror")
	if !o.redisConfigured() {
		log.Info("WARNING: neither --redis-addr nor --redis-sentinel-addrs is set: watch resume cursors are not kept and every restart replays")
	} else {
		st, err := store.NewRedisStore(o.storeConfig())
		if err != nil {
			return nil, err
		}
		log.Info("resume cursors in Redis", "addr", o.RedisAddr, "sentinels", o.RedisSentinelAddrs, "db", o.RedisDB, "keyPrefix", st.KeyPrefix())
		cursors = st
		redisStore = st
	}
	hashKeyRef, err := o.secretHashKeyRef()
	if err != nil {
		return nil, err
	}
	if hashKeyRef.Name == "" {
		log.Info("--secret-hash-key-secret is not set: GitTargets writing Secrets encrypted re-encrypt each Secret once after every restart")
	}
	hashKeys := &secretcrypt.HashKeys{Reader: mgr.GetAPIReader(), Writer: mgr.GetClient(), Ref: hashKeyRef}
	dyn, err := dynamic.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("create dynamic client: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("create discovery client: %w", err)
	}
	policy, err := o.egressPolicy()
	if err != nil {
		return nil, err
	}
	eng := engine.New(dyn, cursors)
	eng.StopTimeout = o.StopTimeout
	if redisStore != nil {
		eng.SecretCache = redisStore
	}
	unattributed, err := o.unattributedAuthor()
	if err != nil {
		return nil, err
	}
	eng.WriterHook = func(cfg *gitwriter.Config) {
		cfg.Egress, cfg.MaxFetchBytes, cfg.MaxFetchObjectBytes = policy, o.GitMaxFetchBytes, o.GitMaxFetchObjectBytes
		cfg.MaxSweepEntries, cfg.MaxSweepChanges = o.GitMaxSweepEntries, o.GitMaxSweepChanges
		cfg.Cluster, cfg.Unattributed = o.ClusterName, unattributed
	}
	if err := mgr.Add(eng); err != nil {
		return nil, err
	}
	// Author attribution: live watch events wait (each on its own) for their audit facts.
	resolver, err := attribution.Setup(mgr, redisStore, o.Attribution)
	if err != nil {
		return nil, err
	}
	if resolver.Enabled() {
		eng.StreamHook = resolver.ConfigureStream
		eng.StreamEndHook = resolver.EndStream
	}
	disc := &controller.Discovery{Client: dc}
	recorder := mgr.GetEventRecorder("siteops-mirror")
	targets := &controller.GitTargetReconciler{Shard: o.Shard, Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Discovery: disc, Engine: eng, Recorder: recorder, CursorsConfigured: cursors != nil, Egress: policy, HashKeys: hashKeys}
	eng.OnTargetChange = func(t types.NamespacedName) { targets.Notify(t) }
	if err := targets.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	for _, cluster := range []bool{false, true} {
		if err := (&controller.RuleReconciler{Shard: o.Shard, Client: mgr.GetClient(), Discovery: disc, Recorder: recorder, Cluster: cluster}).SetupWithManager(mgr); err != nil {
			return nil, err
		}
	}
	if err := (&controller.ProviderReconciler{Shard: o.Shard, Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), Recorder: recorder, Egress: policy}).SetupWithManager(mgr); err != nil {
		return nil, err
	}
	// CommitRequests: the submitter is recorded at admission in Redis (independent of
	// --author-attribution); without Redis no webhook is served and the committer authors them.
	cro := commitrequest.Options{Closer: windowCloser{eng: eng, settle: resolver.Settle}, Identity: attribution.Identity{NoreplyDomain: o.Attribution.NoreplyDomain},
		Shard: o.Shard, TargetLabels: controller.TargetLabels(mgr.GetClient())}
	switch {
	case !o.CommitRequestWebhook:
	case redisStore != nil:
		cro.Authors = redisStore.CommandAuthorStore()
		// Validate refused a served webhook without a CA; Load refuses an empty one again.
		if cro.Clients, err = clientauth.Load("--commitrequest-webhook-client-ca", o.CommitRequestWebhookClientCA, o.CommitRequestWebhookClientNames); err != nil {
			return nil, err
		}
	default:
		log.Info("CommitRequest submitters are not recorded without --redis-addr: their commits are authored by the committer")
	}
	if err := commitrequest.Setup(mgr, cro); err != nil {
		return nil, err
	}
	if o.WatchRuleWebhook {
		if err := ruleaccess.Setup(mgr); err != nil {
			return nil, err
		}
	}
	return eng, nil
}
