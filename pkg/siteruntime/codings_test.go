package siteruntime

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
)

func compress(t *testing.T, coding string, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	switch coding {
	case "br":
		w = brotli.NewWriterLevel(&buf, 5)
	case "gzip":
		w = gzip.NewWriter(&buf)
	default:
		t.Fatalf("coding %s", coding)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// postCoded POSTs body with Content-Encoding coding (none when empty) to a real server of rt.
func postCoded(t *testing.T, srv *httptest.Server, coding string, body []byte) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/.decofile/reload", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Token "+token)
	req.Header.Set("Content-Type", "application/json")
	if coding != "" {
		req.Header.Set("Content-Encoding", coding)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	return resp, string(text)
}

// The runtime takes br and gzip push bodies, stores the JSON byte for byte, and advertises the
// codings it accepts on every reload answer, refusals included.
func TestPushCompressedBodies(t *testing.T) {
	rt, err := New(context.Background(), Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rt.Handler())
	defer srv.Close()
	for i, coding := range []string{"br", "gzip", "", "identity", "GZIP"} {
		content := `{"site":{"n":` + strings.Repeat("1", i+1) + `}}`
		body := []byte(`{"timestamp":"` + string(rune('1'+i)) + `","source":"operator","decofile":` + content + `}`)
		if c := strings.ToLower(coding); c == "br" || c == "gzip" {
			body = compress(t, c, body)
		}
		resp, text := postCoded(t, srv, coding, body) //nolint:bodyclose // postCoded reads and closes it
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%q: HTTP %d %s", coding, resp.StatusCode, text)
		}
		if got := resp.Header.Get("Accept-Encoding"); got != AcceptEncoding {
			t.Fatalf("%q: Accept-Encoding %q, want %q", coding, got, AcceptEncoding)
		}
		if s := rt.Current(); string(s.Decofile) != content {
			t.Fatalf("%q: serves %s, want %s", coding, s.Decofile, content)
		}
	}
	resp, text := postCoded(t, srv, "zstd", []byte("whatever")) //nolint:bodyclose // postCoded reads and closes it
	if resp.StatusCode != http.StatusUnsupportedMediaType || resp.Header.Get("Accept-Encoding") != AcceptEncoding {
		t.Fatalf("zstd: HTTP %d %s, Accept-Encoding %q", resp.StatusCode, text, resp.Header.Get("Accept-Encoding"))
	}
	for _, coding := range []string{"br", "gzip"} {
		resp, text := postCoded(t, srv, coding, []byte("not compressed at all")) //nolint:bodyclose // postCoded reads and closes it
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("corrupt %s: HTTP %d %s", coding, resp.StatusCode, text)
		}
	}
	if rt.Reloads() != 5 {
		t.Fatalf("reloads %d, want 5: a refused body changed the content", rt.Reloads())
	}
}

// A decompression bomb — a few kilobytes that expand far beyond the body limit — is refused with
// 413 after decoding no more than the limit (what the request allocates is measured), for both
// codings; so is a plain body over it.
func TestPushDecompressionBomb(t *testing.T) {
	const limit = 1 << 20
	rt, err := New(context.Background(), Options{Token: token, MaxBodyBytes: limit})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rt.Handler())
	defer srv.Close()
	inflated := append(append([]byte(`{"timestamp":"1","decofile":{"x":"`), bytes.Repeat([]byte("A"), 64<<20)...), `"}}`...)
	for _, coding := range []string{"br", "gzip"} {
		bomb := compress(t, coding, inflated)
		if len(bomb) > limit/2 {
			t.Fatalf("%s bomb is %d bytes: not a bomb", coding, len(bomb))
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		resp, text := postCoded(t, srv, coding, bomb) //nolint:bodyclose // postCoded reads and closes it
		runtime.ReadMemStats(&after)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(text, "larger than") {
			t.Fatalf("%s bomb of %d bytes expanding to %d: HTTP %d %s", coding, len(bomb), len(inflated), resp.StatusCode, text)
		}
		// Decoding stops one byte past the limit: what the request allocated (server and client,
		// the brotli window included) stays far below what the bomb expands to.
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
			t.Fatalf("%s bomb: %d MiB allocated for a %d MiB limit", coding, alloc>>20, limit>>20)
		}
	}
	resp, text := postCoded(t, srv, "", inflated[:limit+1]) //nolint:bodyclose // postCoded reads and closes it
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("plain body over the limit: HTTP %d %s", resp.StatusCode, text)
	}
	if rt.Reloads() != 0 {
		t.Fatal("a refused body changed the content")
	}
}
