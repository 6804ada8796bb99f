// Package fluxsource is the sourceRef source kind: the artifact of a Flux GitRepository,
// OCIRepository or Bucket in the Decofile's namespace, as Flux's source-controller produced it.
//
// The Flux object's status is input, not authority: a tenant that may edit Flux objects may
// also write their status. So the artifact is read from the storage the platform configured
// (never the host the status names), only under the object's own folder of that storage, and
// its digest and size are checked.
package fluxsource

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/source"
	"github.com/siteops/siteops/internal/decofile/sources/kind"
	"github.com/siteops/siteops/internal/egress"
)

// DefaultStorage is where source-controller serves artifacts in a default Flux installation.
const DefaultStorage = "http://source-controller.flux-system.svc.cluster.local."

// Group and Version of the Flux source objects read.
const (
	Group   = "source.toolkit.fluxcd.io"
	Version = "v1"
)

// Kinds are the Flux source kinds a Decofile may name.
var Kinds = []string{"GitRepository", "OCIRepository", "Bucket"}

// +kubebuilder:rbac:groups=source.toolkit.fluxcd.io,resources=gitrepositories;ocirepositories;buckets,verbs=get;list;watch

// Kind is the sourceRef source kind.
type Kind struct {
	env     kind.Env
	once    sync.Once
	base    *url.URL
	client  *http.Client
	initErr error
	ownGate source.Gate
}

// New returns the sourceRef kind, reading Flux objects through env.Reader and artifacts from
// env.FluxStorage (DefaultStorage when empty).
func New(env kind.Env) kind.Kind { return &Kind{env: env} }

// Type is sourceRef.
func (*Kind) Type() decov1.SourceType { return decov1.SourceFlux }

// Remote is true: the artifact is downloaded.
func (*Kind) Remote() bool { return true }

// setup parses the storage URL once and builds a client that may reach that host alone.
func (k *Kind) setup() error {
	k.once.Do(func() {
		raw := k.env.FluxStorage
		if raw == "" {
			raw = DefaultStorage
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			k.initErr = &source.Error{Reason: source.ReasonNotAllowed, Err: fmt.Errorf("the Flux storage URL %q is not http(s)://host[:port] (--flux-storage-url)", raw)}
			return
		}
		host := u.Host
		if u.Port() == "" {
			host = u.Hostname()
		}
		p, err := egress.New(egress.Config{Schemes: []string{u.Scheme}, Hosts: []string{host}, Settings: egress.Settings{Hosts: "--flux-storage-url"}})
		if err != nil {
			k.initErr = &source.Error{Reason: source.ReasonNotAllowed, Err: fmt.Errorf("the Flux storage URL %q: %w", raw, err)}
			return
		}
		k.base, k.client = u, &http.Client{Transport: source.NewTransport(p)}
	})
	return k.initErr
}

// artifact is what a Flux source object's status.artifact says.
type artifact struct {
	path, revision, digest string
	size                   int64
}

// Resolve reads the Flux object's artifact: its revision, and where and how big it is.
func (k *Kind) Resolve(ctx context.Context, df *decov1.Decofile) (kind.Resolution, error) {
	ref := df.Spec.SourceRef
	if ref == nil {
		return kind.Resolution{}, kind.Invalid("spec.source is sourceRef but spec.sourceRef is not set")
	}
	if ref.Namespace != "" && ref.Namespace != df.Namespace {
		return kind.Resolution{}, &source.Error{Reason: source.ReasonNotAllowed, Err: fmt.Errorf("spec.sourceRef names %s %s/%s: a Decofile reads Flux sources of its own namespace %s only", ref.Kind, ref.Namespace, ref.Name, df.Namespace)}
	}
	if err := k.setup(); err != nil {
		return kind.Resolution{}, err
	}
	a, err := k.read(ctx, df.Namespace, ref)
	if err != nil {
		return kind.Resolution{}, err
	}
	return kind.Resolution{Revision: a.revision, Download: func(ctx context.Context) (source.Blocks, error) {
		return k.download(ctx, ref, a)
	}}, nil
}

func gvk(kindName string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: Group, Version: Version, Kind: kindName}
}

func (k *Kind) read(ctx context.Context, ns string, ref *decov1.FluxSourceRef) (artifact, error) {
	what := fmt.Sprintf("%s %s", ref.Kind, ref.Name)
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk(ref.Kind))
	if err := k.env.Reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.Name}, obj); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return artifact{}, &source.Error{Reason: source.ReasonNotFound, Transient: true, Err: fmt.Errorf("%s does not exist in namespace %s; waiting for it", what, ns)}
		case meta.IsNoMatchError(err):
			return artifact{}, &source.Error{Reason: source.ReasonUnavailable, Transient: true, Err: fmt.Errorf("the API server does not serve Flux's %s: is Flux's source-controller installed?", ref.Kind)}
		}
		return artifact{}, &source.Error{Reason: source.ReasonUnavailable, Transient: true, Err: fmt.Errorf("read %s: %w", what, err)}
	}
	rawURL, _, _ := unstructured.NestedString(obj.Object, "status", "artifact", "url")
	revision, _, _ := unstructured.NestedString(obj.Object, "status", "artifact", "revision")
	digest, _, _ := unstructured.NestedString(obj.Object, "status", "artifact", "digest")
	size, _, _ := unstructured.NestedInt64(obj.Object, "status", "artifact", "size")
	if rawURL == "" || revision == "" {
		return artifact{}, &source.Error{Reason: source.ReasonUnavailable, Transient: true, Err: fmt.Errorf("%s has no artifact yet; waiting for source-controller", what)}
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return artifact{}, kind.Invalid("%s: status.artifact.url is not a URL", what)
	}
	// The artifact must be in the object's own folder of the storage: <kind>/<namespace>/<name>/.
	own := "/" + strings.ToLower(ref.Kind) + "/" + ns + "/" + ref.Name + "/"
	p := path.Clean("/" + u.Path)
	if !strings.HasPrefix(p, own) || strings.Contains(u.Path, "..") {
		return artifact{}, &source.Error{Reason: source.ReasonNotAllowed, Err: fmt.Errorf("%s: status.artifact.url is outside the object's own storage folder %s; refused", what, own)}
	}
	if !strings.HasPrefix(digest, "sha256:") {
		return artifact{}, kind.Invalid("%s: status.artifact.digest %q is not a sha256 digest", what, digest)
	}
	return artifact{path: p, revision: revision, digest: digest, size: size}, nil
}

func (k *Kind) download(ctx context.Context, ref *decov1.FluxSourceRef, a artifact) (source.Blocks, error) {
	limits := k.env.Limits.WithDefaults()
	what := fmt.Sprintf("download the artifact of %s %s", ref.Kind, ref.Name)
	if a.size > limits.ArchiveBytes {
		return nil, &source.Error{Reason: source.ReasonLimitExceeded, Err: fmt.Errorf("%s: it is %d bytes, over the %d-byte limit (limit: archive bytes, --decofile-max-archive-bytes)", what, a.size, limits.ArchiveBytes)}
	}
	ctx, cancel := source.Begin(ctx, k.env.Timeout, limits.ArchiveBytes)
	defer cancel()
	gate := k.env.Gate
	if gate == nil {
		gate = &k.ownGate
	}
	release, err := gate.Acquire(ctx, "flux/"+k.base.Host, "Flux storage "+k.base.Host)
	if err != nil {
		return nil, err
	}
	defer release()
	u := *k.base
	u.Path = strings.TrimSuffix(k.base.Path, "/") + a.path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, kind.Invalid("%s: %v", what, err)
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, source.Failure(ctx, what, 0, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, source.Failure(ctx, what, resp.StatusCode, fmt.Errorf("HTTP %d", resp.StatusCode))
	}
	sum := sha256.New()
	body := io.TeeReader(resp.Body, sum)
	blocks, err := source.ExtractTarGz(body, ref.Path, limits)
	if err != nil {
		return nil, source.ReadFailure(ctx, what, err)
	}
	// The digest covers the whole file: read what the extraction left.
	if _, err := io.Copy(io.Discard, body); err != nil {
		return nil, source.ReadFailure(ctx, what, err)
	}
	if got := "sha256:" + hex.EncodeToString(sum.Sum(nil)); got != a.digest {
		return nil, &source.Error{Reason: source.ReasonInvalidArchive, Err: fmt.Errorf("%s: its digest is %s, not the %s its status names; refused", what, got, a.digest)}
	}
	return blocks, nil
}

// Key is the index key of a Flux source object: "flux/<kind>/<namespace>/<name>".
func Key(kindName, ns, name string) string { return "flux/" + kindName + "/" + ns + "/" + name }

// Keys is the Flux object followed, so a change to it reconciles the Decofile at once.
func (*Kind) Keys(df *decov1.Decofile) []string {
	ref := df.Spec.SourceRef
	if ref == nil || (ref.Namespace != "" && ref.Namespace != df.Namespace) {
		return nil
	}
	return []string{Key(ref.Kind, df.Namespace, ref.Name)}
}

// Moves is true: the object's artifact changes with its source.
func (*Kind) Moves(df *decov1.Decofile) bool { return df.Spec.SourceRef != nil }

// Describe names the Flux object and folder.
func (*Kind) Describe(df *decov1.Decofile) string {
	ref := df.Spec.SourceRef
	if ref == nil {
		return string(decov1.SourceFlux)
	}
	return strings.TrimSpace(fmt.Sprintf("flux %s %s %s", ref.Kind, ref.Name, ref.Path))
}

// Watches are the Flux source kinds.
func (*Kind) Watches() []schema.GroupVersionKind {
	out := make([]schema.GroupVersionKind, 0, len(Kinds))
	for _, k := range Kinds {
		out = append(out, gvk(k))
	}
	return out
}

// WatchKey is the key of a Flux source object.
func (*Kind) WatchKey(gvk schema.GroupVersionKind, obj client.Object) string {
	return Key(gvk.Kind, obj.GetNamespace(), obj.GetName())
}
