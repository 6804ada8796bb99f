package source

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"strings"
	"testing"
)

type tarEntry struct {
	name, body string
	typ        byte
	link       string
}

func tarGz(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Typeflag: typ, Linkname: e.link, Mode: 0o644, Size: int64(len(e.body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func reasonOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

func TestExtractTarGzReadsTheFolderOnly(t *testing.T) {
	data := tarGz(t,
		tarEntry{name: "./site/blocks/", typ: tar.TypeDir},
		tarEntry{name: "./site/blocks/Home%20Page.json", body: `{"v":1}`},
		tarEntry{name: "site/blocks/nested/Footer.json", body: `{"f":1}`},
		tarEntry{name: "site/blocksX/x.json", body: `{}`},
		tarEntry{name: "site/blocks/link.json", typ: tar.TypeSymlink, link: "/etc/passwd"},
		tarEntry{name: "../site/blocks/escape.json", body: `{"e":1}`},
	)
	blocks, err := ExtractTarGz(bytes.NewReader(data), "site/blocks", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 3 || string(blocks["Home Page"]) != `{"v":1}` || string(blocks["Footer"]) != `{"f":1}` || string(blocks["escape"]) != `{"e":1}` {
		t.Fatalf("blocks %q: want Home Page, Footer and the cleaned ../ entry, no symlink, nothing from blocksX", blocks)
	}
}

func TestExtractTarGzBounds(t *testing.T) {
	small := tarGz(t, tarEntry{name: "a.json", body: `{"a":1}`})
	// The inflated stream of a small archive is about 2 KiB (headers and end blocks): exactly
	// its size passes, one byte less does not.
	var n int64
	{
		zr, _ := gzip.NewReader(bytes.NewReader(small))
		var b bytes.Buffer
		m, _ := b.ReadFrom(zr)
		n = m
	}
	if _, err := ExtractTarGz(bytes.NewReader(small), "", Limits{ArchiveBytes: n}); err != nil {
		t.Fatalf("an archive inflating to exactly the limit: %v", err)
	}
	if _, err := ExtractTarGz(bytes.NewReader(small), "", Limits{ArchiveBytes: n - 1}); reasonOf(err) != ReasonLimitExceeded {
		t.Fatalf("one byte over: %v, want %s", err, ReasonLimitExceeded)
	}

	bomb := tarGz(t, tarEntry{name: "zeros.bin", body: strings.Repeat("\x00", 8<<20)}, tarEntry{name: "a.json", body: `{}`})
	_, err := ExtractTarGz(bytes.NewReader(bomb), "", Limits{ArchiveBytes: 1 << 20})
	if reasonOf(err) != ReasonLimitExceeded || !strings.Contains(err.Error(), "inflates") {
		t.Fatalf("bomb: %v", err)
	}

	many := make([]tarEntry, 0, 20)
	for i := range 20 {
		many = append(many, tarEntry{name: "d/" + strings.Repeat("x", i+1) + ".txt"})
	}
	if _, err := ExtractTarGz(bytes.NewReader(tarGz(t, many...)), "", Limits{Entries: 10}); reasonOf(err) != ReasonLimitExceeded {
		t.Fatalf("entries: %v", err)
	}
	if _, err := ExtractTarGz(bytes.NewReader([]byte("not gzip")), "", Limits{}); reasonOf(err) != ReasonInvalidArchive {
		t.Fatalf("not gzip: %v", err)
	}
}
