// Package s3target is the s3 target of Decofile delivery: it uploads the merged JSON of a
// Decofile with spec.target: s3 to an S3 (or S3-compatible) bucket, serves the rollout
// controller the stored content, and, when asked to, deletes the object with the Decofile.
//
// Pods never talk to S3 with credentials: the injection webhook points DECO_RELEASE at the
// object's public URL (a CDN or a publicly readable bucket). Both sides derive the object key
// from Decofile.S3ObjectKey, so neither waits for the other.
package s3target

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/siteops/siteops/internal/decofile/inject"
)

// Environment variables that supply the flags' defaults (flags win).
const (
	EnvBucket           = "S3_BUCKET"
	EnvRegion           = "S3_REGION"
	EnvEndpoint         = "S3_ENDPOINT"
	EnvPathStyle        = "S3_PATH_STYLE"
	EnvPrefix           = "S3_PREFIX"
	EnvPublicHost       = "S3_PUBLIC_HOST"
	EnvDeleteOnFinalize = "S3_DELETE_ON_FINALIZE"
)

// LegacyEnvPrefix marks the names the published Decofile operator (v0.11) reads for the same
// settings (DECOFILE_S3_BUCKET, DECOFILE_S3_REGION, DECOFILE_S3_PREFIX, DECOFILE_S3_PUBLIC_HOST):
// each is used when the siteops name is unset, and logged as deprecated.
const LegacyEnvPrefix = "DECOFILE_"

// legacyEnvs are the S3_* names v0.11 reads with LegacyEnvPrefix.
var legacyEnvs = []string{EnvBucket, EnvRegion, EnvPrefix, EnvPublicHost}

// Deprecations lists one line per v0.11 environment variable that is set.
func Deprecations() []string {
	var out []string
	for _, env := range legacyEnvs {
		if _, ok := os.LookupEnv(LegacyEnvPrefix + env); ok {
			out = append(out, fmt.Sprintf("environment variable %s (published Decofile operator v0.11) is deprecated: use %s", LegacyEnvPrefix+env, env))
		}
	}
	return out
}

// Config is the operator's S3 target. The zero value (no bucket) means the s3 target is not
// configured: Decofiles asking for it get Ready=False with reason S3TargetNotConfigured.
type Config struct {
	// Bucket receives the objects.
	Bucket string
	// Region of the bucket; empty takes the region of the standard AWS configuration chain.
	Region string
	// Endpoint is the base URL of an S3-compatible server; empty means AWS S3.
	Endpoint string
	// PathStyle addresses the bucket as <endpoint>/<bucket>/<key> instead of <bucket>.<endpoint>/<key>.
	PathStyle bool
	// Prefix is put before every object key (see Decofile.S3ObjectKey).
	Prefix string
	// PublicHost is where pods fetch objects over HTTPS: "host[:port]" when the host serves the
	// bucket at its root (a CDN, virtual-hosted S3), "host[:port]/path" when it serves it below
	// a path (path-style S3: host/<bucket>). Empty derives it from Bucket, Region and Endpoint.
	PublicHost string
	// PublicScheme is how pods fetch objects from PublicHost: "https" when empty, or "http" for
	// a local S3-compatible server that speaks plain HTTP on a development machine (`siteops dev
	// up` sets it). Not a flag: in a cluster the object is the site's configuration, and pods
	// load it over https only.
	PublicScheme string
	// DeleteOnFinalize adds a finalizer to s3-target Decofiles that deletes their object.
	DeleteOnFinalize bool
	// HTTPClient talks to S3 (nil: the SDK's default); not a flag. With AWS_CA_BUNDLE set the SDK
	// needs its own buildable client, so leave it nil then.
	HTTPClient *http.Client
}

// BindFlags registers the --s3-* flags; unset flags default to the S3_* environment variables.
func (c *Config) BindFlags(fs *pflag.FlagSet) {
	str := func(p *string, name, env, usage string) {
		fs.StringVar(p, name, orEnv(*p, env), usage+" (env "+env+")")
	}
	boolean := func(p *bool, name, env, usage string) {
		v := *p
		if b, err := strconv.ParseBool(os.Getenv(env)); err == nil && !v {
			v = b
		}
		fs.BoolVar(p, name, v, usage+" (env "+env+")")
	}
	str(&c.Bucket, "s3-bucket", EnvBucket, "bucket for Decofiles with spec.target: s3; empty disables the s3 target")
	str(&c.Region, "s3-region", EnvRegion, "region of --s3-bucket (default: the AWS configuration chain's region)")
	str(&c.Endpoint, "s3-endpoint", EnvEndpoint, "base URL of an S3-compatible server (default: AWS S3)")
	boolean(&c.PathStyle, "s3-path-style", EnvPathStyle, "address the bucket path-style (<endpoint>/<bucket>/<key>), as most S3-compatible servers need")
	str(&c.Prefix, "s3-prefix", EnvPrefix, "key prefix of every Decofile object")
	str(&c.PublicHost, "s3-public-host", EnvPublicHost, "host[:port][/path] pods fetch objects from over HTTPS, e.g. a CDN (default: <bucket>.s3.<region>.amazonaws.com, or the endpoint's host for --s3-endpoint)")
	boolean(&c.DeleteOnFinalize, "s3-delete-on-finalize", EnvDeleteOnFinalize, "delete a Decofile's S3 object when the Decofile is deleted (a finalizer); default: objects stay for a bucket lifecycle rule")
}

func orEnv(v, env string) string {
	if v != "" {
		return v
	}
	if e := os.Getenv(env); e != "" || !slices.Contains(legacyEnvs, env) {
		return e
	}
	return os.Getenv(LegacyEnvPrefix + env)
}

// Enabled reports whether the s3 target is configured.
func (c Config) Enabled() bool { return c.Bucket != "" }

// Validate reports settings that cannot work.
func (c Config) Validate() error {
	var errs []error
	if !c.Enabled() {
		if c.Endpoint != "" || c.PublicHost != "" || c.DeleteOnFinalize {
			errs = append(errs, errors.New("--s3-endpoint, --s3-public-host and --s3-delete-on-finalize need --s3-bucket"))
		}
		return errors.Join(errs...)
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("--s3-endpoint %q: want an http:// or https:// base URL", c.Endpoint))
		}
	}
	if h := c.PublicHost; h != "" {
		if strings.Contains(h, "://") {
			errs = append(errs, fmt.Errorf("--s3-public-host %q: give host[:port][/path] without a scheme; pods always fetch over https", h))
		} else if u, err := url.Parse("https://" + h); err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			errs = append(errs, fmt.Errorf("--s3-public-host %q: want host[:port][/path]", h))
		}
	}
	if c.PublicScheme != "" && c.PublicScheme != "https" && c.PublicScheme != "http" {
		errs = append(errs, fmt.Errorf("s3 target public scheme %q: want https or http", c.PublicScheme))
	}
	return errors.Join(errs...)
}

// Webhook is the injection webhook's view of the target: the public host (merged into
// DECO_ALLOWED_AUTHORITIES) and the URL path before the shared object key. region is used only
// for the default AWS host.
func (c Config) Webhook(region string) inject.S3Config {
	if !c.Enabled() {
		return inject.S3Config{}
	}
	public := c.PublicHost
	if public == "" {
		public = c.defaultPublicHost(region)
	}
	host, path, _ := strings.Cut(strings.TrimSuffix(public, "/"), "/")
	// The webhook builds https://<host>/<prefix>/<key>: a public path (the bucket of a path-style
	// server, a CDN folder) goes before the key prefix the uploader uses.
	prefix := strings.Trim(path, "/")
	if p := strings.Trim(c.Prefix, "/"); p != "" {
		prefix = strings.Trim(prefix+"/"+p, "/")
	}
	return inject.S3Config{PublicHost: host, Prefix: prefix, Scheme: c.PublicScheme}
}

// defaultPublicHost is the bucket's own address: AWS's virtual-hosted name, or the endpoint's
// host with the bucket as a path (path-style) or a sub-domain.
func (c Config) defaultPublicHost(region string) string {
	if c.Endpoint != "" {
		if u, err := url.Parse(c.Endpoint); err == nil && u.Host != "" {
			if c.PathStyle {
				return u.Host + "/" + c.Bucket
			}
			return c.Bucket + "." + u.Host
		}
	}
	if region == "" {
		region = defaultRegion
	}
	return c.Bucket + ".s3." + region + ".amazonaws.com"
}

// defaultRegion is used when neither --s3-region nor the AWS configuration chain names one.
const defaultRegion = "us-east-1"
