// Package oci is the oci source kind: the block files in a tar+gzip layer of an OCI artifact, as
// `flux push artifact` and ORAS push a folder. A tag is resolved to its digest, which is the
// revision; the layer is downloaded by digest and verified against it, within the same bounds,
// egress policy and per-namespace credentials (a docker-config Secret) as a git remote.
package oci

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	corev1 "k8s.io/api/core/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/source"
	"github.com/siteops/siteops/internal/decofile/sources/kind"
)

// Scheme prefixes spec.oci.url.
const Scheme = "oci://"

// Kind is the oci source kind.
type Kind struct {
	env       kind.Env
	transport http.RoundTripper
	ownGate   source.Gate // used when env.Gate is nil
}

// New returns the oci kind, bounded by env's shared settings.
func New(env kind.Env) kind.Kind {
	return &Kind{env: env, transport: source.NewTransport(env.Egress)}
}

// Type is oci.
func (*Kind) Type() decov1.SourceType { return decov1.SourceOCI }

// Remote is true.
func (*Kind) Remote() bool { return true }

// Resolve asks the registry for the digest of the artifact spec.oci.url names.
func (k *Kind) Resolve(ctx context.Context, df *decov1.Decofile) (kind.Resolution, error) {
	spec := df.Spec.OCI
	if spec == nil {
		return kind.Resolution{}, kind.Invalid("spec.source is oci but spec.oci is not set")
	}
	ref, err := Parse(spec.URL)
	if err != nil {
		return kind.Resolution{}, err
	}
	auth, err := k.auth(ctx, df.Namespace, spec, ref.Context().RegistryStr())
	if err != nil {
		return kind.Resolution{}, err
	}
	digest, err := k.digest(ctx, ref, auth)
	if err != nil {
		return kind.Resolution{}, err
	}
	revision := digest.String()
	if tag, ok := ref.(name.Tag); ok {
		revision = tag.TagStr() + "@" + revision
	}
	at := ref.Context().Digest(digest.String())
	return kind.Resolution{Revision: revision, Download: func(ctx context.Context) (source.Blocks, error) {
		return k.download(ctx, at, spec.Path, auth)
	}}, nil
}

// Parse reads spec.oci.url: oci://host[:port]/repository[:tag|@sha256:digest], :latest when
// neither is given.
func Parse(url string) (name.Reference, error) {
	rest, ok := strings.CutPrefix(url, Scheme)
	if !ok {
		return nil, kind.Invalid("spec.oci.url %q does not start with %s", url, Scheme)
	}
	// Without a host name.ParseReference would pick a default registry: a tenant's artifact
	// must say where it lives.
	if host, _, found := strings.Cut(rest, "/"); !found || (!strings.ContainsAny(host, ".:") && host != "localhost") {
		return nil, kind.Invalid("spec.oci.url %q names no registry host: write oci://<host>/<repository>", url)
	}
	ref, err := name.ParseReference(rest)
	if err != nil {
		return nil, kind.Invalid("spec.oci.url %q is not an artifact reference: %w", url, err)
	}
	return ref, nil
}

func (k *Kind) gate() *source.Gate {
	if k.env.Gate != nil {
		return k.env.Gate
	}
	return &k.ownGate
}

// begin starts one bounded request series to the registry of ref, holding a slot of its gate.
func (k *Kind) begin(ctx context.Context, ref name.Reference) (context.Context, func(), error) {
	limit := k.env.Limits.WithDefaults().ArchiveBytes
	ctx, cancel := source.Begin(ctx, k.env.Timeout, limit)
	registry := ref.Context().RegistryStr()
	release, err := k.gate().Acquire(ctx, "oci/"+registry, "OCI registry "+registry)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	return ctx, func() { release(); cancel() }, nil
}

func (k *Kind) options(ctx context.Context, auth authn.Authenticator) []remote.Option {
	return []remote.Option{
		remote.WithContext(ctx),
		remote.WithTransport(k.transport),
		remote.WithAuth(auth),
		// The delivery controller retries with backoff; a retry in here would hold the slot.
		remote.WithRetryBackoff(remote.Backoff{Steps: 1}),
	}
}

func (k *Kind) digest(ctx context.Context, ref name.Reference, auth authn.Authenticator) (v1.Hash, error) {
	if d, ok := ref.(name.Digest); ok {
		return v1.NewHash(d.DigestStr())
	}
	ctx, done, err := k.begin(ctx, ref)
	if err != nil {
		return v1.Hash{}, err
	}
	defer done()
	desc, err := remote.Head(ref, k.options(ctx, auth)...)
	if err != nil {
		return v1.Hash{}, failure(ctx, "resolve "+ref.String(), err)
	}
	return desc.Digest, nil
}

// layerTypes end the media types of the layers that hold a folder: Flux's
// application/vnd.cncf.flux.content.v1.tar+gzip, the OCI and Docker image layers, ORAS's.
var layerTypes = []string{"tar+gzip", ".tar.gzip"}

func (k *Kind) download(ctx context.Context, at name.Digest, folder string, auth authn.Authenticator) (source.Blocks, error) {
	ctx, done, err := k.begin(ctx, at)
	if err != nil {
		return nil, err
	}
	defer done()
	what := "download " + at.String()
	desc, err := remote.Get(at, k.options(ctx, auth)...)
	if err != nil {
		return nil, failure(ctx, what, err)
	}
	if desc.MediaType.IsIndex() {
		return nil, kind.Invalid("%s is an index of several manifests, not one artifact: name the artifact's own manifest by @sha256:digest", at)
	}
	img, err := desc.Image()
	if err != nil {
		return nil, failure(ctx, what, err)
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, failure(ctx, what, err)
	}
	var layer *v1.Descriptor
	for i, l := range m.Layers {
		if hasLayerType(string(l.MediaType)) {
			layer = &m.Layers[i]
			break
		}
	}
	if layer == nil {
		return nil, kind.Invalid("artifact %s has no tar+gzip layer holding the block files", at)
	}
	limits := k.env.Limits.WithDefaults()
	if layer.Size > limits.ArchiveBytes {
		return nil, &source.Error{Reason: source.ReasonLimitExceeded, Err: fmt.Errorf("artifact %s: its layer is %d bytes, over the %d-byte limit (limit: archive bytes, --decofile-max-archive-bytes)", at, layer.Size, limits.ArchiveBytes)}
	}
	l, err := img.LayerByDigest(layer.Digest)
	if err != nil {
		return nil, failure(ctx, what, err)
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, failure(ctx, what, err)
	}
	defer func() { _ = rc.Close() }()
	blocks, err := source.ExtractTarGz(rc, folder, limits)
	if err != nil {
		return nil, source.ReadFailure(ctx, what, err)
	}
	// Read to the end: the digest is checked there, so a layer that is not the one the
	// manifest names is refused even when its blocks came before the difference.
	if _, err := io.Copy(io.Discard, rc); err != nil {
		return nil, source.ReadFailure(ctx, what+": verify the layer's digest", err)
	}
	return blocks, nil
}

func hasLayerType(t string) bool {
	for _, suffix := range layerTypes {
		if strings.HasSuffix(t, suffix) {
			return true
		}
	}
	return false
}

// failure explains a failed registry request: the bounds and the URL policy first, then the
// HTTP status go-containerregistry saw.
func failure(ctx context.Context, what string, err error) error {
	code := 0
	var te *transport.Error
	if errors.As(err, &te) {
		code = te.StatusCode
	}
	return source.Failure(ctx, what, code, err)
}

// auth reads the registry's credentials from the docker-config Secret spec.oci.secretRef
// names; anonymous without one.
func (k *Kind) auth(ctx context.Context, ns string, spec *decov1.OCISource, registry string) (authn.Authenticator, error) {
	if spec.SecretRef == nil || spec.SecretRef.Name == "" {
		return authn.Anonymous, nil
	}
	const field = "spec.oci.secretRef"
	s, err := kind.Secret(ctx, k.env.Reader, ns, spec.SecretRef.Name, field)
	if err != nil {
		return nil, err
	}
	cfg, err := dockerConfig(s, registry)
	if err != nil {
		return nil, &source.Error{Reason: source.ReasonCredentials, Err: fmt.Errorf("secret %s named by %s: %w", spec.SecretRef.Name, field, err)}
	}
	return authn.FromConfig(cfg), nil
}

// dockerConfig finds registry's entry in a kubernetes.io/dockerconfigjson Secret.
func dockerConfig(s *corev1.Secret, registry string) (authn.AuthConfig, error) {
	raw, ok := s.Data[corev1.DockerConfigJsonKey]
	if !ok {
		return authn.AuthConfig{}, fmt.Errorf("has no %s key (create it with kubectl create secret docker-registry)", corev1.DockerConfigJsonKey)
	}
	var file struct {
		Auths map[string]authn.AuthConfig `json:"auths"`
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		return authn.AuthConfig{}, errors.New("its .dockerconfigjson is not valid JSON")
	}
	for host, cfg := range file.Auths {
		if hostOf(host) != registry {
			continue
		}
		if cfg.Auth != "" && cfg.Username == "" {
			dec, err := base64.StdEncoding.DecodeString(cfg.Auth)
			user, pass, ok := strings.Cut(string(dec), ":")
			if err != nil || !ok {
				return authn.AuthConfig{}, fmt.Errorf("the auth of %s is not base64 of user:password", registry)
			}
			cfg.Username, cfg.Password, cfg.Auth = user, pass, ""
		}
		return cfg, nil
	}
	return authn.AuthConfig{}, fmt.Errorf("has no credentials for registry %s", registry)
}

// hostOf is the registry of a docker config key: host[:port], https://host/v1/ and the like.
func hostOf(key string) string {
	key = strings.TrimPrefix(strings.TrimPrefix(key, "https://"), "http://")
	host, _, _ := strings.Cut(key, "/")
	return host
}

// Keys are none: registries send no push events the operator receives.
func (*Kind) Keys(*decov1.Decofile) []string { return nil }

// Moves is true for a tag.
func (*Kind) Moves(df *decov1.Decofile) bool {
	if df.Spec.OCI == nil {
		return false
	}
	ref, err := Parse(df.Spec.OCI.URL)
	if err != nil {
		return false
	}
	_, isTag := ref.(name.Tag)
	return isTag
}

// Describe names the artifact and folder.
func (*Kind) Describe(df *decov1.Decofile) string {
	o := df.Spec.OCI
	if o == nil {
		return string(decov1.SourceOCI)
	}
	return strings.TrimSpace("oci " + o.URL + " " + o.Path)
}
