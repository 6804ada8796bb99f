package image

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const systemCABundle = "/etc/ssl/certs/ca-certificates.crt"

// probe is a program run inside the image's file tree: it prints its user and how many CA
// certificates Go finds, and fails if a shell is there.
const probe = `package main

import (
	"crypto/x509"
	"fmt"
	"os"
)

func main() {
	if _, err := os.Stat("/bin/sh"); err == nil {
		fmt.Println("shell present")
		os.Exit(1)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	fmt.Printf("uid=%d args=%v certs=%t\n", os.Getuid(), os.Args[1:], len(pool.Subjects()) > 0) //nolint:staticcheck
}
`

// buildProbe compiles probe statically into dir.
func buildProbe(t *testing.T, dir string) string {
	t.Helper()
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{"main.go": probe, "go.mod": "module probe\n\ngo 1.26\n"} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "probe")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build probe: %v\n%s", err, out)
	}
	return bin
}

func requireCABundle(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(systemCABundle); err != nil {
		t.Skipf("no CA bundle at %s (Debian's ca-certificates; make test installs it)", systemCABundle)
	}
}

// TestBuildIsReproducible builds the same image twice, into two archives: same digest, same
// bytes, and the archive reads back with that digest.
func TestBuildIsReproducible(t *testing.T) {
	requireCABundle(t)
	dir := t.TempDir()
	bin := buildProbe(t, dir)
	spec := Spec{Binary: bin, Name: "site", Args: []string{"serve"}, CABundle: systemCABundle, Labels: map[string]string{"org.opencontainers.image.version": "0.1.0"}}

	var digests []string
	var archives [][]byte
	for i := range 2 {
		img, err := Build(spec)
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(dir, "image"+string(rune('a'+i))+".tar")
		d, err := WriteArchive(file, "siteops-site:0.1.0", img)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		digests, archives = append(digests, d.String()), append(archives, data)

		back, err := tarball.ImageFromPath(file, nil)
		if err != nil {
			t.Fatal(err)
		}
		// A docker-archive keeps the configuration and layer contents but not the manifest's
		// media types, so the image ID (configuration digest) is what must survive it.
		wantID, _ := img.ConfigName()
		if id, err := back.ConfigName(); err != nil || id != wantID {
			t.Errorf("archive reads back with image ID %s (%v), written as %s", id, err, wantID)
		}
	}
	if digests[0] != digests[1] {
		t.Errorf("two builds of the same binary: digests %s and %s", digests[0], digests[1])
	}
	if !bytes.Equal(archives[0], archives[1]) {
		t.Error("two builds of the same binary wrote different archives")
	}

	// A different binary is a different image.
	other := filepath.Join(dir, "other")
	data, _ := os.ReadFile(bin)
	if err := os.WriteFile(other, append(data, 0), 0o755); err != nil {
		t.Fatal(err)
	}
	spec.Binary = other
	img, err := Build(spec)
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := img.Digest(); d.String() == digests[0] {
		t.Error("a changed binary gave the same digest")
	}
}

// TestImageRunsAsNonRootWithoutShell checks the configuration and the file tree: the tree
// holds the binary, the CA bundle and /tmp only, and the binary runs from it (chroot, as the
// image's user) and finds the CA bundle.
func TestImageRunsAsNonRootWithoutShell(t *testing.T) {
	requireCABundle(t)
	dir := t.TempDir()
	img, err := Build(Spec{Binary: buildProbe(t, dir), Name: "siteops-manager", Args: []string{"--leader-elect"}, CABundle: systemCABundle})
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("user %q os %q arch %q, want 65532:65532 linux amd64", cf.Config.User, cf.OS, cf.Architecture)
	}
	if want := []string{"/usr/local/bin/siteops-manager", "--leader-elect"}; !slices.Equal(cf.Config.Entrypoint, want) {
		t.Errorf("entrypoint %v, want %v", cf.Config.Entrypoint, want)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("want one layer, got %d (%v)", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	root := filepath.Join(dir, "rootfs")
	var names []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 || h.ModTime.Unix() != 0 {
			t.Errorf("%s: owner %d:%d mtime %s, want root and the epoch", h.Name, h.Uid, h.Gid, h.ModTime)
		}
		target := filepath.Join(root, h.Name)
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(target, os.FileMode(h.Mode)&os.ModePerm); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(target, data, os.FileMode(h.Mode)); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"etc/", "etc/ssl/", "etc/ssl/certs/", "etc/ssl/certs/ca-certificates.crt", "tmp/", "usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/siteops-manager"}
	if !slices.Equal(names, want) {
		t.Errorf("layer holds %v, want %v", names, want)
	}

	if os.Geteuid() != 0 {
		t.Skip("running the binary from the image's tree needs chroot (root)")
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("chroot", "--userspec=65532:65532", root, cf.Config.Entrypoint[0], "x").CombinedOutput()
	if err != nil {
		t.Fatalf("run the image's entrypoint: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "uid=65532 args=[x] certs=true" {
		t.Errorf("the image's binary said %q, want it to run as 65532 and find the CA bundle", got)
	}
}

// TestBuildRefusesDynamicBinary checks that a binary needing a loader is refused with the fix.
func TestBuildRefusesDynamicBinary(t *testing.T) {
	requireCABundle(t)
	_, err := Build(Spec{Binary: "/bin/ls", CABundle: systemCABundle})
	if err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("Build(/bin/ls) = %v, want an error telling to build with CGO_ENABLED=0", err)
	}
}
