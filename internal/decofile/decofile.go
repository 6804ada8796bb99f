// Package decofile wires the Decofile delivery part into the manager: the controller that turns a
// Decofile into a ConfigMap or S3 object, the injection webhook, and the rollout to running pods.
package decofile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/inject"
	"github.com/siteops/siteops/internal/decofile/notify"
	"github.com/siteops/siteops/internal/decofile/push"
	"github.com/siteops/siteops/internal/decofile/rollout"
	"github.com/siteops/siteops/internal/decofile/s3target"
	"github.com/siteops/siteops/internal/decofile/source"
	"github.com/siteops/siteops/internal/decofile/sources/fluxsource"
	"github.com/siteops/siteops/internal/egress"
	"github.com/siteops/siteops/internal/shard"
)

// Options configures the Decofile part.
type Options struct {
	// Inject configures the injection webhook; the S3 part fills Inject.S3.
	Inject inject.Options
	// DisableInjection leaves the injection webhooks unregistered (e.g. when another replica
	// set serves them).
	DisableInjection bool
	// Rollout configures the notification of running pods (--notify-*, --reload-protocol).
	Rollout rollout.Options
	// Delivery configures the controller that stores Decofiles in ConfigMaps.
	Delivery DeliveryOptions
	// S3 configures the s3 target (--s3-*); without a bucket the target is off.
	S3 s3target.Config
	// Push configures the push event receiver (--push-webhook-*).
	Push PushOptions
	// Shard selects the Decofiles this instance reconciles (by their own labels); the webhook
	// and the push receiver answer for every Decofile.
	Shard shard.Selector
}

// PushOptions are the push event receiver's flags.
type PushOptions struct {
	// BindAddress is where push events are received; "" or "0" turns the receiver off.
	BindAddress string
	// SecretFile holds the shared secret; when empty, EnvPushWebhookSecret is read.
	SecretFile string
	// MaxBodyBytes, Rate, Burst bound requests; MaxPerNamespace bounds the Decofiles of one
	// namespace one push reconciles.
	MaxBodyBytes    int64
	Rate            int
	Burst           int
	MaxPerNamespace int
}

// EnvPushWebhookSecret holds the push receiver's secret when --push-webhook-secret-file is not set.
const EnvPushWebhookSecret = "PUSH_WEBHOOK_SECRET"

// Enabled reports whether the receiver runs.
func (p PushOptions) Enabled() bool { return p.BindAddress != "" && p.BindAddress != "0" }

// secret reads the shared secret from the file or the environment, trimmed of surrounding
// whitespace (a trailing newline in a Secret is common).
func (p PushOptions) secret() ([]byte, error) {
	if p.SecretFile == "" {
		v := strings.TrimSpace(os.Getenv(EnvPushWebhookSecret))
		if v == "" {
			return nil, fmt.Errorf("--push-webhook-bind-address is set but there is no secret: set --push-webhook-secret-file or %s", EnvPushWebhookSecret)
		}
		return []byte(v), nil
	}
	raw, err := os.ReadFile(p.SecretFile)
	if err != nil {
		return nil, fmt.Errorf("--push-webhook-secret-file: %w", err)
	}
	v := bytes.TrimSpace(raw)
	if len(v) == 0 {
		return nil, fmt.Errorf("--push-webhook-secret-file %s is empty", p.SecretFile)
	}
	return v, nil
}

// EnvPodNamespace is the manager's namespace (the chart sets it from the downward API); the push
// receiver keeps its replay cache's Leases there.
const EnvPodNamespace = "POD_NAMESPACE"

// inClusterNamespaceFile holds the pod's namespace when POD_NAMESPACE is not set.
const inClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// replayNamespace is the manager's namespace: POD_NAMESPACE, else the service account's
// namespace in a pod, else "default" (a manager run outside the cluster, as by dev up).
func replayNamespace() string {
	if ns := strings.TrimSpace(os.Getenv(EnvPodNamespace)); ns != "" {
		return ns
	}
	if raw, err := os.ReadFile(inClusterNamespaceFile); err == nil && len(bytes.TrimSpace(raw)) > 0 {
		return string(bytes.TrimSpace(raw))
	}
	return "default"
}

// DeliveryOptions are the delivery controller's flags.
type DeliveryOptions struct {
	// GitHubAPIURL and GitHubArchiveURL are GitHub's API and archive hosts (GitHub Enterprise, tests).
	GitHubAPIURL, GitHubArchiveURL string
	// GitHubTokenOrgs may use the operator's GITHUB_TOKEN; "*" allows every org.
	GitHubTokenOrgs []string
	// GitHubTokenGrants ("namespace=org/repo" or "namespace=org/*") grant namespaces repositories
	// for GITHUB_TOKEN, besides the Namespace annotation deco.sites/github-repos.
	GitHubTokenGrants []string
	// GitHubAppID and GitHubAppPrivateKeyFile identify the operator's GitHub App, whose
	// installation tokens are lent like GITHUB_TOKEN (same orgs and grants), one repository each.
	GitHubAppID             int64
	GitHubAppPrivateKeyFile string
	// SourceTimeout bounds each network operation of a source (resolve, download).
	SourceTimeout time.Duration
	// FluxStorageURL is where Flux's source-controller serves the artifacts that sourceRef
	// Decofiles deliver.
	FluxStorageURL string
	// SourcePerRemote, SourcePerNamespace, SourceSlowAfter and SourceHangAfter bound the
	// retrievals in flight, for git and GitHub sources together (see source.Gate).
	SourcePerRemote, SourcePerNamespace int
	SourceSlowAfter, SourceHangAfter    time.Duration
	// SourceAllowedSchemes are the URL schemes sources may use (https and ssh by default).
	SourceAllowedSchemes []string
	// SourceAllowedHosts are hosts, host:port pairs and CIDRs sources may reach even when private.
	SourceAllowedHosts []string
	// SourceAllowPrivateNetworks lets sources reach private networks (RFC 1918, fc00::/7, CGNAT).
	SourceAllowPrivateNetworks bool
	// CompressionThreshold is the merged-JSON size above which content is stored as brotli.
	CompressionThreshold int
	// Limits bound what one Decofile may pull in.
	Limits source.Limits
	// Concurrency is how many Decofiles are delivered at once.
	Concurrency int
	// SourceConcurrency is how many of them retrieve and hold a remote's content at once.
	SourceConcurrency int
	// MemoryBytes is what deliveries may hold while they merge and encode (0: derived from
	// the Go memory limit, controller.DeliveryMemory).
	MemoryBytes int64
	// MaxMembers and MaxDepth bound a Decofile's JSON (encode.Bounds).
	MaxMembers int64
	MaxDepth   int
}

// EnvLegacyEnableWebhooks is the published Decofile operator's (v0.11) switch for its webhooks:
// the value "false" (and only that, as v0.11 reads it) makes --decofile-disable-injection default
// to true.
const EnvLegacyEnableWebhooks = "ENABLE_WEBHOOKS"

// Deprecations lists one line per v0.11 environment variable that is set, saying what to use
// instead; the manager logs them at start.
func (o *Options) Deprecations() []string {
	out := s3target.Deprecations()
	if _, ok := os.LookupEnv(EnvLegacyEnableWebhooks); ok {
		out = append(out, fmt.Sprintf("environment variable %s (published Decofile operator v0.11) is deprecated: use --decofile-disable-injection", EnvLegacyEnableWebhooks))
	}
	return out
}

// BindFlags registers the part's flags.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	if os.Getenv(EnvLegacyEnableWebhooks) == "false" {
		o.DisableInjection = true
	}
	fs.BoolVar(&o.DisableInjection, "decofile-disable-injection", o.DisableInjection, "do not serve the Decofile injection and delete-protection webhooks")
	o.bindRolloutFlags(fs)
	o.bindDeliveryFlags(fs)
	o.S3.BindFlags(fs)
	o.bindPushFlags(fs)
}

// bindPushFlags registers the push receiver's flags.
func (o *Options) bindPushFlags(fs *pflag.FlagSet) {
	p := &o.Push
	fs.StringVar(&p.BindAddress, "push-webhook-bind-address", orDefault(p.BindAddress, "0"), "address receiving push events from GitHub, Gitea, Forgejo and GitLab at "+push.Path+" (\"0\": off)")
	fs.StringVar(&p.SecretFile, "push-webhook-secret-file", p.SecretFile, "file holding the secret push events are signed with (GitLab: the X-Gitlab-Token); default: the "+EnvPushWebhookSecret+" environment variable")
	fs.Int64Var(&p.MaxBodyBytes, "push-webhook-max-body-bytes", orDefault(p.MaxBodyBytes, push.DefaultMaxBodyBytes), "largest push event body accepted")
	fs.IntVar(&p.Rate, "push-webhook-rate", orDefault(p.Rate, push.DefaultRate), "push events accepted per second, from all senders together (more are refused with 429; polling catches up)")
	fs.IntVar(&p.Burst, "push-webhook-burst", orDefault(p.Burst, push.DefaultBurst), "push events accepted at once above --push-webhook-rate")
	fs.IntVar(&p.MaxPerNamespace, "push-webhook-max-per-namespace", orDefault(p.MaxPerNamespace, controller.DefaultPushMaxPerNamespace), "Decofiles of one namespace one push event reconciles at once (the others follow at their interval)")
}

// bindDeliveryFlags registers the delivery controller's flags.
func (o *Options) bindDeliveryFlags(fs *pflag.FlagSet) {
	d := &o.Delivery
	fs.StringVar(&d.GitHubAPIURL, "github-api-url", orDefault(d.GitHubAPIURL, source.DefaultGitHubAPIURL), "GitHub REST API base URL (commits API), for GitHub Enterprise")
	fs.StringVar(&d.GitHubArchiveURL, "github-archive-url", orDefault(d.GitHubArchiveURL, source.DefaultGitHubArchiveURL), "base URL serving <org>/<repo>/zip/<sha> archives")
	fs.StringSliceVar(&d.GitHubTokenOrgs, "github-token-orgs", d.GitHubTokenOrgs, "GitHub orgs whose Decofiles may use the operator's GITHUB_TOKEN when they name no Secret (\"*\": any org; default: none); each namespace also needs a grant")
	fs.StringSliceVar(&d.GitHubTokenGrants, "github-token-grants", d.GitHubTokenGrants, "repositories namespaces may read with GITHUB_TOKEN, as namespace=org/repo or namespace=org/* (besides the Namespace annotation deco.sites/github-repos)")
	fs.Int64Var(&d.GitHubAppID, "github-app-id", d.GitHubAppID, "ID of the operator's GitHub App; its installation tokens, each scoped to one repository, are used like GITHUB_TOKEN (same --github-token-orgs and grants) and before it")
	fs.StringVar(&d.GitHubAppPrivateKeyFile, "github-app-private-key-file", d.GitHubAppPrivateKeyFile, "PEM private key of the GitHub App named by --github-app-id (mount it from a Secret)")
	fs.StringVar(&d.FluxStorageURL, "flux-storage-url", orDefault(d.FluxStorageURL, fluxsource.DefaultStorage), "base URL of Flux source-controller's artifact storage: sourceRef Decofiles download their artifact there, whatever host its status names")
	fs.DurationVar(&d.SourceTimeout, "source-timeout", orDefault(d.SourceTimeout, source.DefaultTimeout), "time one network operation of a Decofile source (resolving a ref, downloading content) may take")
	fs.IntVar(&d.SourcePerRemote, "source-per-remote", orDefault(d.SourcePerRemote, source.DefaultPerRemote), "retrievals from one git host or GitHub repository at once")
	fs.IntVar(&d.SourcePerNamespace, "source-per-namespace", orDefault(d.SourcePerNamespace, source.DefaultPerTenant), "retrievals for one namespace at once, from any remote (keep it below --source-concurrency)")
	fs.DurationVar(&d.SourceSlowAfter, "source-slow-after", orDefault(d.SourceSlowAfter, source.DefaultSlowAfter), "how long a retrieval may take before its remote counts as slow for its namespace (slow retrievals share one slot of the remote and never wait)")
	fs.DurationVar(&d.SourceHangAfter, "source-hang-after", orDefault(d.SourceHangAfter, source.DefaultHangAfter), "how long a retrieval may take before its namespace counts as hanging for ten minutes (hanging namespaces share one slot on all remotes); at most --source-timeout")
	fs.StringSliceVar(&d.SourceAllowedSchemes, "source-allowed-schemes", orDefaultSlice(d.SourceAllowedSchemes, egress.DefaultSchemes), "URL schemes Decofile sources may use (https, ssh, http, file)")
	fs.StringSliceVar(&d.SourceAllowedHosts, "source-allowed-hosts", d.SourceAllowedHosts, "hosts, host:port pairs, IPs and CIDRs Decofile sources may reach even when loopback, link-local or private")
	fs.BoolVar(&d.SourceAllowPrivateNetworks, "source-allow-private-networks", d.SourceAllowPrivateNetworks, "let Decofile sources reach private networks (RFC 1918, fc00::/7, 100.64.0.0/10); loopback and link-local stay refused")
	fs.IntVar(&d.CompressionThreshold, "compression-threshold", orDefault(d.CompressionThreshold, encode.DefaultThreshold), "merged-JSON size in bytes above which a Decofile is stored brotli-compressed as decofile.bin")
	fs.Int64Var(&d.Limits.ArchiveBytes, "decofile-max-archive-bytes", orDefault(d.Limits.ArchiveBytes, source.DefaultLimits.ArchiveBytes), "largest source archive accepted")
	fs.Int64Var(&d.Limits.DecompressedBytes, "decofile-max-content-bytes", d.Limits.DecompressedBytes, "most block-file bytes read from one source (0: a fifth of --decofile-memory-bytes, at most 64 MiB)")
	fs.IntVar(&d.Limits.Files, "decofile-max-files", orDefault(d.Limits.Files, source.DefaultLimits.Files), "most block files read from one source")
	fs.IntVar(&d.Limits.Entries, "decofile-max-tree-entries", orDefault(d.Limits.Entries, source.DefaultLimits.Entries), "most files and folders looked at under a git source's folder (a folder met twice counts twice, so a tree bomb stops here)")
	fs.IntVar(&d.Concurrency, "decofile-concurrency", orDefault(d.Concurrency, controller.DefaultMaxConcurrentReconciles), "Decofiles delivered at the same time")
	fs.Int64Var(&d.MemoryBytes, "decofile-memory-bytes", d.MemoryBytes, "bytes all deliveries may hold while they merge and encode content, half for content and half for compressors, one namespace half of each (0: two fifths of the Go memory limit, GOMEMLIMIT, or of 90% of 512 MiB when it is not set)")
	fs.Int64Var(&d.MaxMembers, "decofile-max-members", orDefault(d.MaxMembers, encode.DefaultMembers), "most object members and array elements in one Decofile's JSON, counted before anything is decoded")
	fs.IntVar(&d.MaxDepth, "decofile-max-depth", orDefault(d.MaxDepth, encode.DefaultDepth), "deepest nesting of objects and arrays in one Decofile's JSON")
	fs.IntVar(&d.SourceConcurrency, "source-concurrency", orDefault(d.SourceConcurrency, controller.DefaultMaxConcurrentRetrievals), "Decofiles retrieving a remote source (github, git) at the same time, each holding up to --decofile-max-content-bytes until it is stored")
}

// bindRolloutFlags registers the pod notification flags, defaulting unset values to the seed's
// notification strategy (30 pods at once, 2.5 min per pod, 2 attempts, 5 min per rollout).
func (o *Options) bindRolloutFlags(fs *pflag.FlagSet) {
	n := &o.Rollout.Notify
	fs.IntVar(&n.Concurrency, "notify-concurrency", orDefault(n.Concurrency, notify.DefaultConcurrency), "pods notified at the same time during a Decofile rollout")
	fs.DurationVar(&n.PodTimeout, "notify-pod-timeout", orDefault(n.PodTimeout, notify.DefaultPodTimeout), "time one notification attempt on one pod may take")
	fs.IntVar(&n.Attempts, "notify-attempts", orDefault(n.Attempts, notify.DefaultAttempts), "attempts per pod (unreachable pods and 5xx answers are retried with backoff)")
	fs.DurationVar(&n.Timeout, "notify-timeout", orDefault(n.Timeout, notify.DefaultTimeout), "time a whole rollout may take; pods not confirmed by then fail it")
	fs.Int64Var(&o.Rollout.MemoryBytes, "notify-memory-bytes", o.Rollout.MemoryBytes, "Decofile content bytes running push rollouts may hold together while they send it (not while a progressive rollout pauses), one namespace a third of it or one content larger than that alone (0: three times --decofile-max-content-bytes)")
	if o.Rollout.Protocol == "" {
		o.Rollout.Protocol = notify.ProtocolPush
	}
	fs.StringVar((*string)(&o.Rollout.Protocol), "reload-protocol", string(o.Rollout.Protocol), "how pods are told about new content: push (POST the Decofile) or long-poll (GET until timestamp.txt is updated)")
}

func orDefaultSlice[T any](v, def []T) []T {
	if len(v) == 0 {
		return def
	}
	return v
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Validate reports flag values that cannot work.
func (o *Options) Validate() error {
	var errs []error
	if o.Rollout.Protocol != "" {
		if _, err := notify.ParseProtocol(string(o.Rollout.Protocol)); err != nil {
			errs = append(errs, fmt.Errorf("--reload-protocol: %w", err))
		}
	}
	n := o.Rollout.Notify
	if n.Concurrency < 0 || n.Attempts < 0 || n.PodTimeout < 0 || n.Timeout < 0 || o.Rollout.MemoryBytes < 0 {
		errs = append(errs, errors.New("--notify-concurrency, --notify-attempts, --notify-pod-timeout, --notify-timeout and --notify-memory-bytes must be positive"))
	}
	d := o.Delivery
	if d.CompressionThreshold < 0 || d.Limits.ArchiveBytes < 0 || d.Limits.DecompressedBytes < 0 || d.Limits.Files < 0 || d.Limits.Entries < 0 || d.Concurrency < 0 || d.SourceConcurrency < 0 || d.MemoryBytes < 0 || d.MaxMembers < 0 || d.MaxDepth < 0 {
		errs = append(errs, errors.New("--compression-threshold, --decofile-max-*, --decofile-memory-bytes, --decofile-concurrency and --source-concurrency must not be negative"))
	}
	if err := o.S3.Validate(); err != nil {
		errs = append(errs, err)
	}
	if _, err := d.controllerOptions(); err != nil {
		errs = append(errs, err)
	}
	if d.SourceTimeout < 0 {
		errs = append(errs, errors.New("--source-timeout must not be negative"))
	}
	if d.SourcePerRemote < 0 || d.SourcePerNamespace < 0 || d.SourceSlowAfter < 0 || d.SourceHangAfter < 0 {
		errs = append(errs, errors.New("--source-per-remote, --source-per-namespace, --source-slow-after and --source-hang-after must not be negative"))
	}
	if p := o.Push; p.Enabled() {
		if _, err := p.secret(); err != nil {
			errs = append(errs, err)
		}
		if p.MaxBodyBytes < 0 || p.Rate < 0 || p.Burst < 0 || p.MaxPerNamespace < 0 {
			errs = append(errs, errors.New("--push-webhook-max-body-bytes, --push-webhook-rate, --push-webhook-burst and --push-webhook-max-per-namespace must not be negative"))
		}
	}
	return errors.Join(errs...)
}

// controllerOptions turns the flags into the delivery controller's options; the fallback GitHub
// token comes from the GITHUB_TOKEN environment variable, never from a flag.
func (d DeliveryOptions) controllerOptions() (controller.Options, error) {
	policy, err := egress.New(egress.Config{Schemes: d.SourceAllowedSchemes, Hosts: d.SourceAllowedHosts,
		AllowPrivate: d.SourceAllowPrivateNetworks, Settings: source.EgressSettings})
	if err != nil {
		return controller.Options{}, fmt.Errorf("--source-allowed-schemes / --source-allowed-hosts: %w", err)
	}
	grants, err := source.ParseGrants(d.GitHubTokenGrants)
	if err != nil {
		return controller.Options{}, fmt.Errorf("--github-token-grants: %w", err)
	}
	tokens := source.TokenPolicy{Fallback: os.Getenv("GITHUB_TOKEN"), AllowedOrgs: d.GitHubTokenOrgs, Grants: grants}
	if (d.GitHubAppID != 0) != (d.GitHubAppPrivateKeyFile != "") {
		return controller.Options{}, errors.New("--github-app-id and --github-app-private-key-file go together: set both or neither")
	}
	if d.GitHubAppID != 0 {
		key, err := source.LoadGitHubAppKey(d.GitHubAppPrivateKeyFile)
		if err != nil {
			return controller.Options{}, fmt.Errorf("--github-app-private-key-file: %w", err)
		}
		tokens.App = &source.GitHubApp{ID: d.GitHubAppID, Key: key, APIURL: d.GitHubAPIURL, Egress: policy, Timeout: d.SourceTimeout}
	}
	// Budgets and the content limit not set follow the Go memory limit (the chart sets
	// GOMEMLIMIT to 90% of the container's limit).
	d = d.withMemoryDefaults(controller.GoMemoryLimit())
	// A retrieval cut off by --source-timeout always counts as a hang.
	hangAfter := orDefault(d.SourceHangAfter, source.DefaultHangAfter)
	if d.SourceTimeout > 0 && hangAfter > d.SourceTimeout {
		hangAfter = d.SourceTimeout
	}
	gate := &source.Gate{PerRemote: d.SourcePerRemote, PerTenant: d.SourcePerNamespace,
		SlowAfter: d.SourceSlowAfter, HangAfter: hangAfter}
	return controller.Options{
		GitHub:                  &source.GitHub{APIURL: d.GitHubAPIURL, ArchiveURL: d.GitHubArchiveURL, Limits: d.Limits, Egress: policy, Timeout: d.SourceTimeout, Gate: gate},
		Git:                     &source.Git{Limits: d.Limits, Egress: policy, Timeout: d.SourceTimeout, Gate: gate},
		Tokens:                  tokens,
		FluxStorage:             d.FluxStorageURL,
		Encode:                  encode.Options{Threshold: d.CompressionThreshold},
		MaxConcurrentReconciles: d.Concurrency,
		MaxConcurrentRetrievals: d.SourceConcurrency,
		MemoryBytes:             d.MemoryBytes,
		Bounds:                  encode.Bounds{Members: d.MaxMembers, Depth: d.MaxDepth},
	}, nil
}

// withMemoryDefaults fills the delivery memory budget and the content limit, when not set,
// from the Go memory limit goLimit.
func (d DeliveryOptions) withMemoryDefaults(goLimit int64) DeliveryOptions {
	if d.MemoryBytes == 0 {
		d.MemoryBytes = controller.DeliveryMemory(goLimit)
	}
	if d.Limits.DecompressedBytes == 0 {
		d.Limits.DecompressedBytes = controller.ContentLimit(d.MemoryBytes)
	}
	return d
}

// Setup registers the part's controllers and webhooks with mgr.
func Setup(mgr ctrl.Manager, o Options) error {
	delivery, err := o.Delivery.controllerOptions()
	if err != nil {
		return err
	}
	if o.Rollout.MaxContentBytes == 0 {
		// The rollout decodes stored content with the same bound the sources read it with.
		o.Rollout.MaxContentBytes = o.Delivery.withMemoryDefaults(controller.GoMemoryLimit()).Limits.DecompressedBytes
	}
	var deleter *s3target.Store
	if o.S3.Enabled() {
		store, err := s3target.New(context.Background(), o.S3)
		if err != nil {
			return fmt.Errorf("set up the Decofile s3 target: %w", err)
		}
		delivery.S3 = store
		if o.Inject.S3 == (inject.S3Config{}) {
			o.Inject.S3 = store.Webhook()
		}
		o.Rollout.Loaders = maps.Clone(o.Rollout.Loaders)
		if o.Rollout.Loaders == nil {
			o.Rollout.Loaders = map[decov1.TargetType]rollout.Loader{}
		}
		o.Rollout.Loaders[decov1.TargetS3] = s3target.Loader{Store: store}
		if o.S3.DeleteOnFinalize {
			deleter = store
		}
	}
	// Always running: with delete-on-finalize off it releases Decofiles that still carry the
	// finalizer from a time it was on.
	if err := s3target.SetupFinalizers(mgr, deleter, o.Shard); err != nil {
		return fmt.Errorf("set up Decofile S3 finalizer: %w", err)
	}
	if !o.DisableInjection {
		if err := inject.Setup(mgr, o.Inject); err != nil {
			return fmt.Errorf("set up Decofile injection webhook: %w", err)
		}
	}
	delivery.Shard = o.Shard
	if o.Push.Enabled() {
		if err := setupPush(mgr, o.Push, &delivery); err != nil {
			return err
		}
	}
	// New content of a Decofile without pods is recorded as rolled out in the delivery's write.
	delivery.Rollout = rollout.Settler{Reader: mgr.GetAPIReader()}
	o.Rollout.Shard = o.Shard
	if err := controller.Setup(mgr, delivery); err != nil {
		return fmt.Errorf("set up Decofile delivery controller: %w", err)
	}
	if err := rollout.Setup(mgr, o.Rollout); err != nil {
		return fmt.Errorf("set up Decofile rollout controller: %w", err)
	}
	return nil
}

// setupPush adds the push receiver to mgr and the push trigger to the delivery controller.
func setupPush(mgr ctrl.Manager, p PushOptions, delivery *controller.Options) error {
	secret, err := p.secret()
	if err != nil {
		return err
	}
	trigger, err := controller.NewPushTrigger(context.Background(), mgr, p.MaxPerNamespace, delivery.Shard)
	if err != nil {
		return err
	}
	delivery.Push = trigger
	// The replay cache's Leases are read straight from the API server: the manager's cache
	// would watch Leases in every namespace.
	direct, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()})
	if err != nil {
		return fmt.Errorf("push receiver: API client for the replay cache: %w", err)
	}
	rcv, err := push.NewReceiver(push.Config{Addr: p.BindAddress, Secret: secret, Trigger: trigger,
		MaxBodyBytes: p.MaxBodyBytes, Rate: float64(p.Rate), Burst: p.Burst,
		Client: direct, Namespace: replayNamespace()})
	if err != nil {
		return err
	}
	if err := mgr.Add(rcv); err != nil {
		return fmt.Errorf("add the push receiver: %w", err)
	}
	if err := mgr.Add(rcv.Sweeper()); err != nil {
		return fmt.Errorf("add the push replay cache sweeper: %w", err)
	}
	return nil
}
