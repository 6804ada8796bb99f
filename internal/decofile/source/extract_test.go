package source

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/siteops/siteops/internal/decofile/source/ghtest"
)

func extract(t *testing.T, files map[string]string, folder string, l Limits) (Blocks, error) {
	t.Helper()
	raw := ghtest.Zip("repo-abc", files)
	return ExtractZip(bytes.NewReader(raw), int64(len(raw)), folder, ZipOptions{StripTopDir: true}, l)
}

func names(b Blocks) []string {
	var out []string
	for n := range b {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func wantReason(t *testing.T, err error, reason string, mentions ...string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("want a source error %s, got %v", reason, err)
	}
	if e.Reason != reason {
		t.Fatalf("reason %s, want %s (%v)", e.Reason, reason, err)
	}
	for _, m := range mentions {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q does not mention %q", err, m)
		}
	}
}

func TestExtractNamesAndFolderBoundaries(t *testing.T) {
	b, err := extract(t, map[string]string{
		".deco/blocks/Campaign%20Timer%20-%2001.json":     `{"a":1}`,
		".deco/blocks/pages-produto+123.json":             `{"plus":true}`,
		".deco/blocks/Ma%C3%A7%C3%A3%20%F0%9F%8D%8E.json": `{"unicode":"maçã"}`,
		".deco/blocks/nested/deeper/Header.json":          `{"n":1}`,
		".deco/blocks/readme.md":                          `not a block`,
		".deco/blocks/100%.json":                          `{"bad-escape":true}`,
		".deco/blocksX/Sibling.json":                      `{"must":"not match"}`,
		".deco/other.json":                                `{"outside":true}`,
	}, "./.deco/blocks/", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"100%", "Campaign Timer - 01", "Header", "Maçã 🍎", "pages-produto+123"}
	if got := names(b); !slices.Equal(got, want) {
		t.Fatalf("blocks %q, want %q", got, want)
	}
	if string(b["Header"]) != `{"n":1}` {
		t.Fatalf("nested block content %s", b["Header"])
	}
}

func TestExtractRootFolder(t *testing.T) {
	b, err := extract(t, map[string]string{"a.json": `1`, "sub/b.json": `2`}, "", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(b); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("blocks %q", got)
	}
}

func TestExtractInvalidJSONNamesTheFile(t *testing.T) {
	_, err := extract(t, map[string]string{"blocks/ok.json": `{}`, "blocks/broken.json": `{"a":`}, "blocks", Limits{})
	wantReason(t, err, ReasonInvalidContent, "blocks/broken.json")
}

func TestExtractCollisionNamesBothFiles(t *testing.T) {
	_, err := extract(t, map[string]string{"blocks/a%20b.json": `{}`, "blocks/sub/a b.json": `{}`}, "blocks", Limits{})
	wantReason(t, err, ReasonNameCollision, "blocks/a%20b.json", "blocks/sub/a b.json", `"a b"`)
}

func TestExtractNoFiles(t *testing.T) {
	_, err := extract(t, map[string]string{"blocksX/a.json": `{}`}, "blocks", Limits{})
	wantReason(t, err, ReasonInvalidContent, "no .json block files under blocks")
}

func TestExtractLimits(t *testing.T) {
	files := map[string]string{"b/1.json": `1`, "b/2.json": `2`, "b/3.json": `3`}
	_, err := extract(t, files, "b", Limits{Files: 2})
	wantReason(t, err, ReasonLimitExceeded, "more than 2 block files")

	raw := ghtest.Zip("top", files)
	_, err = ExtractZip(bytes.NewReader(raw), int64(len(raw)), "b", ZipOptions{StripTopDir: true}, Limits{ArchiveBytes: int64(len(raw) - 1)})
	wantReason(t, err, ReasonLimitExceeded, "over the", "archive bytes")
}

func TestExtractZipBombStopsAtLimit(t *testing.T) {
	bomb := ghtest.ZipBomb("top", "b/bomb.json", 50<<20)
	if len(bomb) > 200<<10 {
		t.Fatalf("test premise: the bomb is %d bytes, not small", len(bomb))
	}
	_, err := ExtractZip(bytes.NewReader(bomb), int64(len(bomb)), "b", ZipOptions{StripTopDir: true}, Limits{DecompressedBytes: 1 << 20})
	wantReason(t, err, ReasonLimitExceeded, "1048576-byte limit")
}

// TestExtractLyingSizeHeader: an entry whose header claims a tiny size must still be cut off at
// the limit while reading.
func TestExtractLyingSizeHeader(t *testing.T) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.CreateHeader(&zip.FileHeader{Name: "top/b/x.json", Method: zip.Store})
	_, _ = w.Write([]byte(`"` + strings.Repeat("y", 4096) + `"`))
	_ = zw.Close()
	raw := buf.Bytes()
	// Patch the 32-bit uncompressed size in the central directory to 2.
	cd := bytes.LastIndex(raw, []byte("PK\x01\x02"))
	raw[cd+24], raw[cd+25], raw[cd+26], raw[cd+27] = 2, 0, 0, 0
	_, err := ExtractZip(bytes.NewReader(raw), int64(len(raw)), "b", ZipOptions{StripTopDir: true}, Limits{DecompressedBytes: 100})
	// The limit error itself: a checksum or format error would also be an error, and would pass
	// while the limit is not enforced.
	wantReason(t, err, ReasonLimitExceeded, "over the 100-byte limit", "decompressed bytes")
}

func TestExtractFS(t *testing.T) {
	fsys := fstest.MapFS{
		"site/.deco/blocks/A%2FB.json":  {Data: []byte(`{"slash":true}`)},
		"site/.deco/blocks/x/C.json":    {Data: []byte("\xef\xbb\xbf{\"bom\":1}")},
		"site/.deco/blocksX/D.json":     {Data: []byte(`{}`)},
		"site/.deco/blocks/.git/e.json": {Data: []byte(`{}`)},
	}
	b, err := ExtractFS(fsys, "site/.deco/blocks", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(b); !slices.Equal(got, []string{"A/B", "C"}) {
		t.Fatalf("blocks %q", got)
	}
	_, err = ExtractFS(fsys, "missing", Limits{})
	wantReason(t, err, ReasonInvalidContent, "no .json block files")
}

func TestExtractFSOnDisk(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "blocks"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "blocks", "big.json"), []byte(`"`+strings.Repeat("z", 1000)+`"`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ExtractFS(os.DirFS(dir), "blocks", Limits{DecompressedBytes: 500})
	wantReason(t, err, ReasonLimitExceeded, "500-byte limit")
}

func TestInline(t *testing.T) {
	b, err := Inline(map[string]json.RawMessage{"a.json": json.RawMessage(`{}`), "b": json.RawMessage(`[]`)})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(b); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("blocks %q", got)
	}
	_, err = Inline(map[string]json.RawMessage{"a.json": json.RawMessage(`{}`), "a": json.RawMessage(`{}`)})
	wantReason(t, err, ReasonNameCollision, `"a"`, `"a.json"`)
}

func TestTokenPolicy(t *testing.T) {
	ctx := context.Background()
	nsAnnotations := map[string]map[string]string{
		"shop":   {AnnotationGitHubRepos: "Deco-Sites/shop, deco-sites/assets"},
		"agency": {AnnotationGitHubRepos: "deco-sites/*"},
		"bad":    {AnnotationGitHubRepos: "*/*,*"},
	}
	p := TokenPolicy{Fallback: "op", AllowedOrgs: []string{"Deco-Sites"},
		Grants: map[string][]string{"blog": {"deco-sites/blog"}},
		Namespaces: func(_ context.Context, ns string) (map[string]string, error) {
			return nsAnnotations[ns], nil
		}}
	cases := []struct {
		ns, org, repo, own string
		token, from        string
	}{
		{"shop", "deco-sites", "shop", "", "op", TokenFromFallback},
		{"shop", "deco-sites", "ASSETS", "", "op", TokenFromFallback},
		{"shop", "deco-sites", "other-tenant", "", "", TokenNone},
		{"agency", "deco-sites", "anything", "", "op", TokenFromFallback},
		{"blog", "deco-sites", "blog", "", "op", TokenFromFallback},
		{"blog", "deco-sites", "shop", "", "", TokenNone},
		{"bad", "deco-sites", "shop", "", "", TokenNone},
		{"none", "deco-sites", "shop", "", "", TokenNone},
		{"shop", "other", "shop", "", "", TokenNone},
		{"none", "other", "x", "own", "own", TokenFromSecret},
	}
	for _, c := range cases {
		tok, from, err := p.Choose(ctx, c.ns, c.org, c.repo, c.own)
		if err != nil || tok != c.token || from != c.from {
			t.Errorf("%s reading %s/%s: %q %q %v, want %q %q", c.ns, c.org, c.repo, tok, from, err, c.token, c.from)
		}
	}
	if tok, _, _ := (TokenPolicy{AllowedOrgs: []string{"*"}, Grants: map[string][]string{"a": {"x/*"}}}).Choose(ctx, "a", "x", "y", ""); tok != "" {
		t.Errorf("no fallback configured but got %q", tok)
	}
	if _, err := ParseGrants([]string{"shop=acme/shop", "blog=acme/*"}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"acme/shop", "=acme/shop", "shop=acme", "shop=*/*", "shop=a/b/c"} {
		if _, err := ParseGrants([]string{bad}); err == nil {
			t.Errorf("grant %q accepted", bad)
		}
	}
}

// FuzzExtractZip feeds arbitrary bytes as an archive: it must never panic and never return more
// content than the limits allow.
func FuzzExtractZip(f *testing.F) {
	f.Add(ghtest.Zip("top", map[string]string{"b/a.json": `{"a":1}`, "b/c%20d.json": `[1,2]`}))
	f.Add(ghtest.ZipBomb("top", "b/x.json", 1<<16))
	f.Add([]byte("PK\x05\x06" + strings.Repeat("\x00", 18)))
	f.Add([]byte("not a zip"))
	l := Limits{ArchiveBytes: 1 << 20, DecompressedBytes: 4096, Files: 8}
	f.Fuzz(func(t *testing.T, raw []byte) {
		b, err := ExtractZip(bytes.NewReader(raw), int64(len(raw)), "b", ZipOptions{StripTopDir: true}, l)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error without a reason: %v", err)
			}
			return
		}
		var total int
		for n, v := range b {
			total += len(v)
			if !json.Valid(v) {
				t.Fatalf("block %q is not valid JSON", n)
			}
		}
		if len(b) > l.Files || int64(total) > l.DecompressedBytes {
			t.Fatalf("limits exceeded: %d files, %d bytes", len(b), total)
		}
	})
}
