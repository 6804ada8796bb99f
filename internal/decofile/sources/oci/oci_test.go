package oci_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/source"
	"github.com/siteops/siteops/internal/decofile/sources/kind"
	"github.com/siteops/siteops/internal/decofile/sources/oci"
	"github.com/siteops/siteops/internal/egress"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m, servers.APIServerOptions{}) }

// loopback lets the kind reach the test's registry on 127.0.0.1 over plain HTTP, as
// --source-allowed-hosts and --source-allowed-schemes would.
var loopback = egress.MustNew(egress.Config{Schemes: []string{"http", "https"}, Hosts: []string{"127.0.0.1"}, Settings: source.EgressSettings})

var limits = source.Limits{ArchiveBytes: 1 << 20, DecompressedBytes: 1 << 20}

func decofile(ns, url string) *decov1.Decofile {
	return &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "site"},
		Spec: decov1.DecofileSpec{Source: decov1.SourceOCI, OCI: &decov1.OCISource{URL: url, Path: "blocks"}}}
}

func resolveAndDownload(t *testing.T, k kind.Kind, df *decov1.Decofile) (string, source.Blocks, error) {
	t.Helper()
	ctx := context.Background()
	res, err := k.Resolve(ctx, df)
	if err != nil {
		return "", nil, err
	}
	b, err := res.Download(ctx)
	return res.Revision, b, err
}

func reason(err error) string {
	var e *source.Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

func TestTagResolvesToItsDigestAndFollowsPushes(t *testing.T) {
	reg := testenv.Registry(t, servers.RegistryOptions{})
	k := oci.New(kind.Env{Egress: loopback, Limits: limits})
	first, err := reg.PushArtifact("shop/decofile", "prod", map[string]string{"blocks/Home%20Page.json": `{"v":1}`, "README.md": "not a block", "blocksX/x.json": `{}`})
	if err != nil {
		t.Fatal(err)
	}
	df := decofile("", reg.URL("shop/decofile", "prod"))
	if !k.Moves(df) || k.Keys(df) != nil {
		t.Errorf("a tag: Moves=%v Keys=%v, want it polled and without push keys", k.Moves(df), k.Keys(df))
	}
	rev, blocks, err := resolveAndDownload(t, k, df)
	if err != nil {
		t.Fatal(err)
	}
	if rev != "prod@"+first {
		t.Errorf("revision %q, want prod@%s", rev, first)
	}
	if len(blocks) != 1 || string(blocks["Home Page"]) != `{"v":1}` {
		t.Errorf("blocks %q, want only Home Page from the blocks folder", blocks)
	}

	second, err := reg.PushArtifact("shop/decofile", "prod", map[string]string{"blocks/home.json": `{"v":2}`})
	if err != nil {
		t.Fatal(err)
	}
	rev, blocks, err = resolveAndDownload(t, k, df)
	if err != nil || rev != "prod@"+second || string(blocks["home"]) != `{"v":2}` {
		t.Fatalf("after the tag moved: %q %q %v, want prod@%s", rev, blocks, err, second)
	}

	// Pinned by digest: nothing to poll, and the revision is known without asking.
	pinned := decofile("", reg.URL("shop/decofile", first))
	before := reg.BlobGets()
	res, err := k.Resolve(context.Background(), pinned)
	if err != nil || res.Revision != first || k.Moves(pinned) {
		t.Fatalf("pinned: revision %q, moves %v, %v", res.Revision, k.Moves(pinned), err)
	}
	if reg.BlobGets() != before {
		t.Error("resolving a digest downloaded a blob")
	}
	if b, err := res.Download(context.Background()); err != nil || string(b["Home Page"]) != `{"v":1}` {
		t.Fatalf("pinned download %q %v", b, err)
	}
}

// TestInternalAddressRefused: under the default policy a tenant's artifact URL naming a
// loopback or private address is refused before any request leaves.
func TestInternalAddressRefused(t *testing.T) {
	reg := testenv.Registry(t, servers.RegistryOptions{})
	if _, err := reg.PushArtifact("internal/secrets", "v1", map[string]string{"blocks/a.json": `{}`}); err != nil {
		t.Fatal(err)
	}
	k := oci.New(kind.Env{Limits: limits}) // no Egress: https to public addresses only
	for _, url := range []string{reg.URL("internal/secrets", "v1"), "oci://10.0.0.1:5000/internal/secrets:v1", "oci://localhost:5000/x:v1"} {
		_, _, err := resolveAndDownload(t, k, decofile("", url))
		if reason(err) != source.ReasonNotAllowed {
			t.Errorf("%s: %v (reason %q), want %s", url, err, reason(err), source.ReasonNotAllowed)
		}
	}
	if reg.BlobGets() != 0 {
		t.Errorf("the registry served %d blobs", reg.BlobGets())
	}
}

// TestLayerBombIsBounded: a small layer that inflates past the archive limit, and a layer
// whose declared size is over it, are refused with LimitExceeded; the second is not downloaded.
func TestLayerBombIsBounded(t *testing.T) {
	reg := testenv.Registry(t, servers.RegistryOptions{})
	k := oci.New(kind.Env{Egress: loopback, Limits: limits})

	bomb, err := servers.TarGz(map[string]string{"blocks/zeros.txt": strings.Repeat("\x00", 64<<20), "blocks/a.json": `{}`})
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(bomb)) > limits.ArchiveBytes {
		t.Fatalf("the bomb is %d bytes compressed, not small", len(bomb))
	}
	if _, err := reg.PushLayer("bomb", "v1", bomb, servers.FluxContentMediaType); err != nil {
		t.Fatal(err)
	}
	_, _, err = resolveAndDownload(t, k, decofile("", reg.URL("bomb", "v1")))
	if reason(err) != source.ReasonLimitExceeded || !strings.Contains(err.Error(), "inflates") {
		t.Fatalf("bomb: %v, want LimitExceeded for the inflated size", err)
	}

	big := make([]byte, 2*limits.ArchiveBytes)
	_, _ = rand.Read(big)
	if _, err := reg.PushLayer("big", "v1", big, servers.FluxContentMediaType); err != nil {
		t.Fatal(err)
	}
	before := reg.BlobGets()
	_, _, err = resolveAndDownload(t, k, decofile("", reg.URL("big", "v1")))
	if reason(err) != source.ReasonLimitExceeded {
		t.Fatalf("big layer: %v, want LimitExceeded", err)
	}
	if n := reg.BlobGets() - before; n > 1 { // the config blob at most, never the layer
		t.Errorf("%d blobs downloaded for a layer over the limit", n)
	}
}

// TestTamperedLayerIsRefused: content that does not match the digest the manifest names is
// never delivered.
func TestTamperedLayerIsRefused(t *testing.T) {
	reg := testenv.Registry(t, servers.RegistryOptions{})
	k := oci.New(kind.Env{Egress: loopback, Limits: limits})
	if _, err := reg.PushArtifact("site", "v1", map[string]string{"blocks/a.json": `{"a":1}`}); err != nil {
		t.Fatal(err)
	}
	reg.SetTamper(true)
	_, blocks, err := resolveAndDownload(t, k, decofile("", reg.URL("site", "v1")))
	if err == nil || blocks != nil {
		t.Fatalf("a tampered layer delivered %q", blocks)
	}
}

func TestArtifactWithoutAFolderLayer(t *testing.T) {
	reg := testenv.Registry(t, servers.RegistryOptions{})
	k := oci.New(kind.Env{Egress: loopback, Limits: limits})
	if _, err := reg.PushLayer("json", "v1", []byte(`{"a":1}`), "application/json"); err != nil {
		t.Fatal(err)
	}
	_, _, err := resolveAndDownload(t, k, decofile("", reg.URL("json", "v1")))
	if reason(err) != source.ReasonInvalidContent || !strings.Contains(err.Error(), "tar+gzip") {
		t.Fatalf("%v, want InvalidContent naming the missing tar+gzip layer", err)
	}
}

// TestIndexIsInvalidContent: an index of several manifests is not one artifact; it is refused
// for good (a change of the URL fixes it), not retried.
func TestIndexIsInvalidContent(t *testing.T) {
	reg := testenv.Registry(t, servers.RegistryOptions{})
	k := oci.New(kind.Env{Egress: loopback, Limits: limits})
	if err := reg.PushIndex("multi", "v1", map[string]string{"blocks/a.json": `{}`}); err != nil {
		t.Fatal(err)
	}
	_, _, err := resolveAndDownload(t, k, decofile("", reg.URL("multi", "v1")))
	if reason(err) != source.ReasonInvalidContent || !strings.Contains(err.Error(), "index") {
		t.Fatalf("%v, want InvalidContent naming the index", err)
	}
}

func TestURLsWithoutARegistryHostAreInvalid(t *testing.T) {
	for _, url := range []string{"oci://shop/decofile:v1", "oci://decofile", "https://registry.example/x:v1", "oci://registry.example/UPPER:v1"} {
		if _, err := oci.Parse(url); reason(err) != source.ReasonInvalidContent {
			t.Errorf("%s: %v, want InvalidContent", url, err)
		}
	}
	if _, err := oci.Parse("oci://registry.example:5000/shop/decofile@sha256:" + strings.Repeat("a", 64)); err != nil {
		t.Errorf("a digest reference: %v", err)
	}
}

// TestDockerConfigSecret: a registry behind basic auth is read with the docker-config Secret
// of the Decofile's namespace; without it, or with a Secret for another registry, it is not.
func TestDockerConfigSecret(t *testing.T) {
	c := testenv.APIServer(t)
	ctx := context.Background()
	ns := c.Namespace(t, "oci-creds", nil)
	reg := testenv.Registry(t, servers.RegistryOptions{Username: "puller", Password: "s3cret"})
	if _, err := reg.PushArtifact("private/site", "v1", map[string]string{"blocks/a.json": `{"private":true}`}); err != nil {
		t.Fatal(err)
	}
	k := oci.New(kind.Env{Egress: loopback, Limits: limits, Reader: c.Client})
	dockerConfig := func(name, host, user, pass string) {
		auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
		raw, _ := json.Marshal(map[string]any{"auths": map[string]any{host: map[string]string{"auth": auth}}})
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Type: corev1.SecretTypeDockerConfigJson,
			Data: map[string][]byte{corev1.DockerConfigJsonKey: raw}}
		if err := c.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	dockerConfig("good", reg.Host, "puller", "s3cret")
	dockerConfig("wrong", reg.Host, "puller", "guess")
	dockerConfig("elsewhere", "registry.example", "puller", "s3cret")
	df := decofile(ns, reg.URL("private/site", "v1"))

	cases := []struct {
		secret, reason string
	}{
		{"", source.ReasonUnauthorized},
		{"missing", source.ReasonCredentials},
		{"elsewhere", source.ReasonCredentials},
		{"wrong", source.ReasonUnauthorized},
	}
	for _, cs := range cases {
		df.Spec.OCI.SecretRef = nil
		if cs.secret != "" {
			df.Spec.OCI.SecretRef = &corev1.LocalObjectReference{Name: cs.secret}
		}
		_, _, err := resolveAndDownload(t, k, df)
		if reason(err) != cs.reason {
			t.Errorf("secret %q: %v (reason %q), want %s", cs.secret, err, reason(err), cs.reason)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("secret %q: the error carries the password: %v", cs.secret, err)
		}
	}
	df.Spec.OCI.SecretRef = &corev1.LocalObjectReference{Name: "good"}
	_, blocks, err := resolveAndDownload(t, k, df)
	if err != nil || !bytes.Equal(blocks["a"], []byte(`{"private":true}`)) {
		t.Fatalf("with the Secret: %q %v", blocks, err)
	}
}
