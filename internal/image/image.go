// Package image builds the project's container images from statically linked binaries: one
// layer on an empty base holding the binary and a CA bundle, run as an unprivileged user, with
// no shell. Every byte is derived from the inputs (fixed timestamps, ownership and order), so
// two builds of the same binaries give the same digest.
package image

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// NonRootUID is the user and group the images run as (the conventional "nonroot" ID).
const NonRootUID = 65532

// BinaryDir is where the binary is placed in the image.
const BinaryDir = "/usr/local/bin"

// CABundlePath is where the CA bundle is placed, the path Go's crypto/x509 reads first on Linux.
const CABundlePath = "/etc/ssl/certs/ca-certificates.crt"

// Spec describes one image.
type Spec struct {
	// Binary is the path of a statically linked executable on this machine.
	Binary string
	// Name is the executable's name in the image (default: the base name of Binary).
	Name string
	// Args are the arguments after the executable in the image's entrypoint.
	Args []string
	// CABundle is the path of a PEM CA bundle on this machine to ship in the image.
	CABundle string
	// Created is the image's creation time; the zero time gives the Unix epoch, for
	// reproducibility (set it from SOURCE_DATE_EPOCH to date a release).
	Created time.Time
	// Labels are OCI labels of the image configuration.
	Labels map[string]string
}

// Build assembles the image Spec describes, for linux/amd64.
func Build(s Spec) (v1.Image, error) {
	if s.Binary == "" || s.CABundle == "" {
		return nil, errors.New("image: both a binary and a CA bundle are needed")
	}
	exe := s.Name
	if exe == "" {
		exe = path.Base(s.Binary)
	}
	created := s.Created
	if created.IsZero() {
		created = time.Unix(0, 0)
	}
	created = created.UTC()

	bin, err := os.ReadFile(s.Binary)
	if err != nil {
		return nil, fmt.Errorf("read binary for the image: %w", err)
	}
	if !isStaticELF(s.Binary) {
		return nil, fmt.Errorf("image: %s is not a statically linked ELF executable: build it with CGO_ENABLED=0", s.Binary)
	}
	ca, err := os.ReadFile(s.CABundle)
	if err != nil {
		return nil, fmt.Errorf("read the CA bundle (install Debian's ca-certificates): %w", err)
	}
	layerTar, err := layer(created, []file{
		{path: path.Join(BinaryDir, exe), mode: 0o755, data: bin},
		{path: CABundlePath, mode: 0o644, data: ca},
		// /tmp is where the manager writes its webhook certificates by default.
		{path: "/tmp", mode: 0o1777 | modeDir},
	})
	if err != nil {
		return nil, err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("image layer: %w", err)
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), l)
	if err != nil {
		return nil, fmt.Errorf("image layer: %w", err)
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: created}
	cf.History = nil
	cf.Config.User = fmt.Sprintf("%d:%d", NonRootUID, NonRootUID)
	cf.Config.Entrypoint = append([]string{path.Join(BinaryDir, exe)}, s.Args...)
	cf.Config.Cmd = nil
	cf.Config.WorkingDir = "/"
	cf.Config.Env = []string{"PATH=" + BinaryDir, "SSL_CERT_FILE=" + CABundlePath}
	cf.Config.Labels = s.Labels
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("image configuration: %w", err)
	}
	return mutate.CreatedAt(img, v1.Time{Time: created})
}

// WriteArchive writes img as a docker-archive tarball tagged ref (what `ctr images import` and
// `docker load` read) and returns its digest.
func WriteArchive(file, ref string, img v1.Image) (v1.Hash, error) {
	tag, err := name.NewTag(ref, name.WithDefaultRegistry(""))
	if err != nil {
		return v1.Hash{}, fmt.Errorf("image reference %q: %w", ref, err)
	}
	// Written beside and renamed over: a test loading the archive while `make image` runs again
	// reads the old file or the new one, never half of one.
	tmp := file + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		_ = os.Remove(tmp)
		return v1.Hash{}, fmt.Errorf("write image archive %s: %w", file, err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return v1.Hash{}, fmt.Errorf("write image archive %s: %w", file, err)
	}
	return img.Digest()
}

// modeDir marks a directory entry in file.mode.
const modeDir = 1 << 31

type file struct {
	path string
	mode int64
	data []byte
}

// layer writes files, with their parent directories, as a tar stream with fixed owners and
// times, sorted by path.
func layer(mtime time.Time, files []file) ([]byte, error) {
	dirs := map[string]bool{}
	for _, f := range files {
		for d := path.Dir(f.path); d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	entries := make([]file, 0, len(files)+len(dirs))
	for d := range dirs {
		entries = append(entries, file{path: d, mode: 0o755 | modeDir})
	}
	for _, f := range files {
		if f.mode&modeDir != 0 && dirs[f.path] {
			continue
		}
		entries = append(entries, f)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].path < entries[j].path })

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.path[1:],
			Mode:    e.mode &^ modeDir,
			ModTime: mtime,
		}
		if e.mode&modeDir != 0 {
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("image layer %s: %w", e.path, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("image layer %s: %w", e.path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// isStaticELF reports whether file is an ELF executable without a program interpreter (a
// dynamically linked one would need a loader and libraries the image does not have).
func isStaticELF(file string) bool {
	f, err := elf.Open(file)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return f.Type == elf.ET_EXEC || f.Type == elf.ET_DYN
}
