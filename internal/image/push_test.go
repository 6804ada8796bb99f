package image

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestPushToARegistry pushes an image to a real registry server on loopback that demands
// credentials: refused without them, pushed with the ones a docker config holds, and the
// registry then serves the very digest the build has.
func TestPushToARegistry(t *testing.T) {
	requireCABundle(t)
	dir := t.TempDir()
	img, err := Build(Spec{Binary: buildProbe(t, dir), CABundle: systemCABundle})
	if err != nil {
		t.Fatal(err)
	}
	want, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}

	var refused atomic.Int64
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user, pass, ok := r.BasicAuth(); !ok || user != "ci" || pass != "s3cret" {
			refused.Add(1)
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()

	t.Setenv("DOCKER_CONFIG", t.TempDir()) // an empty docker config: no credentials
	if _, err := Push(ctx, img, "platform/probe", "1", PushOptions{Registry: host, Insecure: true}); err == nil || refused.Load() == 0 {
		t.Fatalf("pushed without credentials (%v, %d requests refused)", err, refused.Load())
	}

	config := t.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte("ci:s3cret"))
	if err := os.WriteFile(filepath.Join(config, "config.json"), fmt.Appendf(nil, `{"auths":{%q:{"auth":%q}}}`, host, auth), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", config)
	pushed, err := Push(ctx, img, "platform/probe", "1", PushOptions{Registry: host, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	if pushed.DigestStr() != want.String() || pushed.Context().RepositoryStr() != "platform/probe" {
		t.Fatalf("pushed %s, want platform/probe@%s", pushed, want)
	}
	tag, err := name.NewTag(host+"/platform/probe:1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Get(tag, remote.WithAuthFromKeychain(authn.DefaultKeychain))
	if err != nil {
		t.Fatal(err)
	}
	if desc.Digest != want {
		t.Errorf("the registry serves %s for the tag, want the archive's %s", desc.Digest, want)
	}
}
