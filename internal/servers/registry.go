package servers

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Media types of a Flux OCI artifact: a config and one layer holding a tar+gzip of a folder.
const (
	FluxConfigMediaType  types.MediaType = "application/vnd.cncf.flux.config.v1+json"
	FluxContentMediaType types.MediaType = "application/vnd.cncf.flux.content.v1.tar+gzip"
)

// RegistryOptions configures an OCI registry.
type RegistryOptions struct {
	// Addr to listen on; default 127.0.0.1:0.
	Addr string
	// Username and Password, when set, are required as HTTP basic auth on every request.
	Username, Password string
}

// Registry is an OCI distribution registry held in memory (go-containerregistry's), for
// artifacts and images.
type Registry struct {
	// Host is host:port, as artifact references name it.
	Host string

	server   *http.Server
	blobGets atomic.Int64
	tamper   atomic.Bool
	opts     RegistryOptions
}

// StartRegistry starts a registry.
func StartRegistry(ctx context.Context, o RegistryOptions) (*Registry, error) {
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen for the OCI registry: %w", err)
	}
	r := &Registry{Host: l.Addr().String(), opts: o}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	h = r.observe(h)
	if o.Username != "" || o.Password != "" {
		h = basicAuth(o.Username, o.Password, h)
	}
	r.server = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.server.Serve(l) }()
	return r, nil
}

// BlobGets is how many blob downloads the registry answered.
func (r *Registry) BlobGets() int64 { return r.blobGets.Load() }

// SetTamper makes every blob download from now on differ from its digest by one byte, as a
// compromised registry or mirror would serve it.
func (r *Registry) SetTamper(on bool) { r.tamper.Store(on) }

func (r *Registry) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet || !strings.Contains(req.URL.Path, "/blobs/") {
			next.ServeHTTP(w, req)
			return
		}
		r.blobGets.Add(1)
		if !r.tamper.Load() {
			next.ServeHTTP(w, req)
			return
		}
		rec := &bufferedResponse{header: http.Header{}, status: http.StatusOK}
		next.ServeHTTP(rec, req)
		body := rec.body.Bytes()
		if len(body) > 0 {
			body[len(body)-1] ^= 0xff
		}
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.status)
		_, _ = w.Write(body)
	})
}

type bufferedResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header         { return b.header }
func (b *bufferedResponse) WriteHeader(status int)      { b.status = status }
func (b *bufferedResponse) Write(p []byte) (int, error) { return b.body.Write(p) }

// URL is the oci:// reference of repo at tag (or @digest when tag starts with "sha256:").
func (r *Registry) URL(repo, tag string) string {
	if strings.HasPrefix(tag, "sha256:") {
		return "oci://" + r.Host + "/" + repo + "@" + tag
	}
	return "oci://" + r.Host + "/" + repo + ":" + tag
}

// PushArtifact pushes files (path → content) as a Flux artifact to repo:tag and returns the
// manifest's digest.
func (r *Registry) PushArtifact(repo, tag string, files map[string]string) (string, error) {
	layer, err := TarGz(files)
	if err != nil {
		return "", err
	}
	return r.PushLayer(repo, tag, layer, FluxContentMediaType)
}

// PushLayer pushes an artifact of one layer of the given media type to repo:tag and returns the
// manifest's digest.
func (r *Registry) PushLayer(repo, tag string, layer []byte, mt types.MediaType) (string, error) {
	ref, err := name.ParseReference(r.Host+"/"+repo+":"+tag, name.Insecure)
	if err != nil {
		return "", err
	}
	img, err := artifact(layer, mt)
	if err != nil {
		return "", err
	}
	if err := remote.Write(ref, img, remote.WithAuth(r.auth())); err != nil {
		return "", fmt.Errorf("push %s: %w", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		return "", err
	}
	return d.String(), nil
}

// PushIndex pushes an OCI index holding one artifact of files to repo:tag, as a multi-platform
// push would.
func (r *Registry) PushIndex(repo, tag string, files map[string]string) error {
	layer, err := TarGz(files)
	if err != nil {
		return err
	}
	ref, err := name.ParseReference(r.Host+"/"+repo+":"+tag, name.Insecure)
	if err != nil {
		return err
	}
	img, err := artifact(layer, FluxContentMediaType)
	if err != nil {
		return err
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), mutate.IndexAddendum{Add: img})
	if err := remote.WriteIndex(ref, idx, remote.WithAuth(r.auth())); err != nil {
		return fmt.Errorf("push %s: %w", ref, err)
	}
	return nil
}

// artifact is an OCI manifest with Flux's config media type and one layer of media type mt.
func artifact(layer []byte, mt types.MediaType) (v1.Image, error) {
	return mutate.AppendLayers(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), FluxConfigMediaType), static.NewLayer(layer, mt))
}

func (r *Registry) auth() authn.Authenticator {
	if r.opts.Username != "" {
		return &authn.Basic{Username: r.opts.Username, Password: r.opts.Password}
	}
	return authn.Anonymous
}

// TarGz is a gzip-compressed tar of files (path → content), in path order.
func TarGz(files map[string]string) ([]byte, error) {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, p := range paths {
		if err := tw.WriteHeader(&tar.Header{Name: p, Mode: 0o644, Size: int64(len(files[p])), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := io.WriteString(tw, files[p]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Stop stops the registry.
func (r *Registry) Stop() error { return r.server.Close() }
