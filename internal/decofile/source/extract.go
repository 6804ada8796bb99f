// Package source retrieves a Decofile's blocks: inline values, a GitHub repository (commits API
// with ETags to resolve refs, then the ZIP archive of the commit) or any git remote (go-git,
// shallow, one ref). Extraction is bounded: archive bytes, decompressed bytes and file count are
// limited, and content is streamed so memory stays proportional to the limits.
package source

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"io/fs"
	"net/url"
	"path"
	"sort"
	"strings"
)

// Limits bound what one Decofile may pull in.
type Limits struct {
	// ArchiveBytes is the largest archive (or git pack) accepted.
	ArchiveBytes int64
	// DecompressedBytes is the most block-file content read in total; for a git commit the
	// folders walked count too.
	DecompressedBytes int64
	// Files is the most block files accepted.
	Files int
	// Entries is the most files and folders (block files or not) looked at under the block
	// folder of a git commit or a file system; in a git commit a folder met twice counts twice.
	// A ZIP archive's entries are bounded by ArchiveBytes.
	Entries int
}

// DefaultLimits are the limits used when none are configured.
var DefaultLimits = Limits{ArchiveBytes: 256 << 20, DecompressedBytes: 64 << 20, Files: 20_000, Entries: 200_000}

// Flag names of the content limits, named in the messages of refusals.
const (
	flagContentBytes = "--decofile-max-content-bytes"
	flagFiles        = "--decofile-max-files"
	flagEntries      = "--decofile-max-tree-entries"
)

// WithDefaults fills every unset limit from DefaultLimits.
func (l Limits) WithDefaults() Limits {
	if l.ArchiveBytes <= 0 {
		l.ArchiveBytes = DefaultLimits.ArchiveBytes
	}
	if l.DecompressedBytes <= 0 {
		l.DecompressedBytes = DefaultLimits.DecompressedBytes
	}
	if l.Files <= 0 {
		l.Files = DefaultLimits.Files
	}
	if l.Entries <= 0 {
		l.Entries = DefaultLimits.Entries
	}
	return l
}

// Blocks are the extracted block values by block name.
type Blocks map[string]json.RawMessage

// collector gathers the .json files under one folder into Blocks, enforcing the limits.
type collector struct {
	prefix  string // cleaned folder, "" for the root
	limits  Limits
	bytes   int64
	entries int // entries looked at, against limits.Entries
	blocks  Blocks
	origin  map[string]string // block name → file path, to name both files of a collision
}

func newCollector(folder string, l Limits) *collector {
	return &collector{prefix: CleanPath(folder), limits: l.WithDefaults(), blocks: Blocks{}, origin: map[string]string{}}
}

// CleanPath normalises a repository folder: no leading "./" or "/", no trailing "/", "" for the root.
func CleanPath(p string) string {
	p = path.Clean("/" + strings.TrimSpace(p))
	return strings.TrimPrefix(p, "/")
}

// BlockName maps a file path to its block name: the base name, URL-decoded, without ".json".
// A name that is not valid URL encoding is kept as written. "+" is a literal plus (path
// encoding), as the site runtime writes it.
func BlockName(file string) string {
	base := strings.TrimSuffix(path.Base(file), ".json")
	if dec, err := url.PathUnescape(base); err == nil {
		return dec
	}
	return base
}

// match reports whether the file at p (cleaned, relative to the repository root) is a block
// file: a .json file inside the folder, matched on folder boundaries (".deco/blocks" does not
// match ".deco/blocksX/a.json").
func (c *collector) match(p string) bool {
	if !strings.HasSuffix(p, ".json") || strings.HasSuffix(p, "/") {
		return false
	}
	if c.prefix == "" {
		return true
	}
	return strings.HasPrefix(p, c.prefix+"/")
}

// add reads one block file of declared size (-1 when unknown) from open.
func (c *collector) add(p string, size int64, open func() (io.ReadCloser, error)) error {
	if len(c.blocks) >= c.limits.Files {
		return &Error{Reason: ReasonLimitExceeded, Err: fmt.Errorf("more than %d block files under %q (limit: files, %s)", c.limits.Files, c.prefix, flagFiles)}
	}
	left := c.limits.DecompressedBytes - c.bytes
	if size > left {
		return c.tooBig(c.bytes + size)
	}
	rc, err := open()
	if err != nil {
		return &Error{Reason: ReasonInvalidArchive, Err: fmt.Errorf("open %s: %w", p, err)}
	}
	defer func() { _ = rc.Close() }()
	// Read one byte past what is left so a lying size header cannot push us over the limit.
	data, err := readSized(io.LimitReader(rc, left+1), min(size, left))
	if err != nil {
		return &Error{Reason: ReasonInvalidArchive, Err: fmt.Errorf("read %s: %w", p, err)}
	}
	if int64(len(data)) > left {
		return c.tooBig(c.bytes + int64(len(data)))
	}
	c.bytes += int64(len(data))
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // editors on Windows add a BOM
	if !json.Valid(data) {
		return &Error{Reason: ReasonInvalidContent, Err: fmt.Errorf("file %s is not valid JSON: %w", p, jsonError(data))}
	}
	name := BlockName(p)
	if prev, ok := c.origin[name]; ok {
		a, b := prev, p
		if b < a {
			a, b = b, a
		}
		return &Error{Reason: ReasonNameCollision, Err: fmt.Errorf("files %s and %s both become block %q; rename one of them", a, b, name)}
	}
	c.origin[name] = p
	c.blocks[name] = data
	return nil
}

// readSized is io.ReadAll starting with room for the size the file declares (-1: unknown), so a
// file of that size is read into one allocation instead of a doubling series of them.
func readSized(r io.Reader, size int64) ([]byte, error) {
	data := make([]byte, 0, max(size, 511)+1)
	for {
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
		n, err := r.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if errors.Is(err, io.EOF) {
			return data, nil
		}
		if err != nil {
			return data, err
		}
	}
}

func (c *collector) tooBig(observed int64) error {
	return &Error{Reason: ReasonLimitExceeded, Err: fmt.Errorf("content read under %q (block files, and the folders of a git commit) takes at least %d bytes, over the %d-byte limit (limit: decompressed bytes, %s)", c.prefix, observed, c.limits.DecompressedBytes, flagContentBytes)}
}

// charge counts n bytes read besides block files (a folder of a git commit) against the
// content limit, before they are read.
func (c *collector) charge(n int64) error {
	if n > c.limits.DecompressedBytes-c.bytes {
		return c.tooBig(c.bytes + n)
	}
	c.bytes += n
	return nil
}

// visit counts one entry looked at against the entry limit.
func (c *collector) visit() error {
	c.entries++
	if c.entries > c.limits.Entries {
		return &Error{Reason: ReasonLimitExceeded, Err: fmt.Errorf("more than %d files and folders under %q (limit: tree entries, %s)", c.limits.Entries, c.prefix, flagEntries)}
	}
	return nil
}

func (c *collector) result() (Blocks, error) {
	if len(c.blocks) == 0 {
		where := c.prefix
		if where == "" {
			where = "the repository root"
		}
		return nil, &Error{Reason: ReasonInvalidContent, Err: fmt.Errorf("no .json block files under %s; check the path", where)}
	}
	return c.blocks, nil
}

func jsonError(data []byte) error {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	return errors.New("invalid JSON")
}

// ZipOptions says how to read a ZIP archive.
type ZipOptions struct {
	// StripTopDir drops the first path element of every entry (GitHub archives put everything
	// under "<repo>-<sha>/").
	StripTopDir bool
}

// ExtractZip reads the block files under folder from the ZIP archive r of size bytes.
func ExtractZip(r io.ReaderAt, size int64, folder string, o ZipOptions, l Limits) (Blocks, error) {
	l = l.WithDefaults()
	if size > l.ArchiveBytes {
		return nil, &Error{Reason: ReasonLimitExceeded, Err: fmt.Errorf("archive is %d bytes, over the %d-byte limit (limit: archive bytes)", size, l.ArchiveBytes)}
	}
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, &Error{Reason: ReasonInvalidArchive, Err: fmt.Errorf("read ZIP archive: %w", err)}
	}
	c := newCollector(folder, l)
	files := make([]*zip.File, 0, len(zr.File))
	for _, f := range zr.File {
		if f.FileInfo().IsDir() {
			continue
		}
		files = append(files, f)
	}
	// Sort so that collisions and errors are reported the same way whatever the archive order.
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	for _, f := range files {
		name := f.Name
		if o.StripTopDir {
			_, rest, ok := strings.Cut(name, "/")
			if !ok {
				continue
			}
			name = rest
		}
		p := CleanPath(name)
		if !c.match(p) {
			continue
		}
		size := int64(f.UncompressedSize64)
		if f.UncompressedSize64 > 1<<62 {
			size = 1 << 62
		}
		if err := c.add(p, size, func() (io.ReadCloser, error) { return openEntry(f) }); err != nil {
			return nil, err
		}
	}
	return c.result()
}

// openEntry reads a ZIP entry's content without trusting its declared size: archive/zip stops
// at the size the header claims, so the collector's byte limit is what bounds the reading, and
// the CRC is checked at the end.
func openEntry(f *zip.File) (io.ReadCloser, error) {
	raw, err := f.OpenRaw()
	if err != nil {
		return nil, err
	}
	var rc io.ReadCloser
	switch f.Method {
	case zip.Store:
		rc = io.NopCloser(raw)
	case zip.Deflate:
		rc = flate.NewReader(raw)
	default:
		return nil, fmt.Errorf("compression method %d is not supported; use deflate or store", f.Method)
	}
	return &crcReader{ReadCloser: rc, want: f.CRC32, hash: crc32.NewIEEE()}, nil
}

type crcReader struct {
	io.ReadCloser
	want uint32
	hash hash.Hash32
}

func (r *crcReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.hash.Write(p[:n])
	if errors.Is(err, io.EOF) && r.hash.Sum32() != r.want {
		return n, errors.New("checksum mismatch: the archive is corrupt")
	}
	return n, err
}

// SingleTopDir returns the one top folder every entry of the archive lies under (the layout of
// GitHub archives), or "" when there is none, so callers can decide on ZipOptions.StripTopDir.
func SingleTopDir(r io.ReaderAt, size int64) string {
	zr, err := zip.NewReader(r, size)
	if err != nil || len(zr.File) == 0 {
		return ""
	}
	top := ""
	for _, f := range zr.File {
		first, _, ok := strings.Cut(f.Name, "/")
		if !ok || (top != "" && top != first) {
			return ""
		}
		top = first
	}
	return top
}

// ExtractFS reads the block files under folder from a file system (a checkout or a folder).
func ExtractFS(fsys fs.FS, folder string, l Limits) (Blocks, error) {
	c := newCollector(folder, l)
	root := "."
	if c.prefix != "" {
		root = c.prefix
	}
	err := fs.WalkDir(fsys, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == root {
				return nil // reported as "no block files" below
			}
			return &Error{Reason: ReasonInvalidArchive, Err: fmt.Errorf("read %s: %w", p, err)}
		}
		if err := c.visit(); err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !c.match(p) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return &Error{Reason: ReasonInvalidArchive, Err: fmt.Errorf("stat %s: %w", p, err)}
		}
		return c.add(p, info.Size(), func() (io.ReadCloser, error) { return fsys.Open(p) })
	})
	if err != nil {
		return nil, err
	}
	return c.result()
}

// Inline returns the blocks of spec.inline.value, with a trailing ".json" stripped from names
// as the seed's controller does; two keys that become the same name are a collision.
func Inline(values map[string]json.RawMessage) (Blocks, error) {
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make(Blocks, len(values))
	origin := make(map[string]string, len(values))
	for _, k := range keys {
		name := strings.TrimSuffix(k, ".json")
		if prev, ok := origin[name]; ok {
			return nil, &Error{Reason: ReasonNameCollision, Err: fmt.Errorf("inline keys %q and %q both become block %q; remove one", prev, k, name)}
		}
		if !json.Valid(values[k]) {
			return nil, &Error{Reason: ReasonInvalidContent, Err: fmt.Errorf("inline value %q is not valid JSON", k)}
		}
		origin[name] = k
		out[name] = values[k]
	}
	if len(out) == 0 {
		return nil, &Error{Reason: ReasonInvalidContent, Err: errors.New("spec.inline.value is empty")}
	}
	return out, nil
}
