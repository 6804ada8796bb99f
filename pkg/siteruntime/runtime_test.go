package siteruntime

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
)

const token = "s3cret-token"

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func binOf(t *testing.T, js string) string {
	t.Helper()
	var buf bytes.Buffer
	w := brotli.NewWriterLevel(&buf, brotli.BestCompression)
	if _, err := w.Write([]byte(js)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

func fileURL(p string) string { return (&url.URL{Scheme: "file", Path: p}).String() }

func TestLoadJSONAndBin(t *testing.T) {
	dir := t.TempDir()
	js := `{"site":{"name":"x & y"}}`
	writeFile(t, filepath.Join(dir, "decofile.json"), js)
	writeFile(t, filepath.Join(dir, "decofile.bin"), binOf(t, js))
	writeFile(t, filepath.Join(dir, "timestamp.txt"), "1731598481\n")
	for _, name := range []string{"decofile.json", "decofile.bin"} {
		rt, err := New(context.Background(), Options{Release: fileURL(filepath.Join(dir, name))})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		snap := rt.Current()
		if string(snap.Decofile) != js || snap.Timestamp != 1731598481 || snap.Hash != hashOf([]byte(js)) {
			t.Fatalf("%s: got %q ts=%d", name, snap.Decofile, snap.Timestamp)
		}
	}
}

func TestLoadRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "bad.json"), `[1,2]`)
	writeFile(t, filepath.Join(dir, "bad.bin"), `not base64 brotli!!`)
	cases := map[string]string{
		fileURL(filepath.Join(dir, "bad.json")):     "not a JSON object",
		fileURL(filepath.Join(dir, "bad.bin")):      "decode decofile.bin",
		fileURL(filepath.Join(dir, "missing.json")): "open decofile",
		"ftp://example/x":                           "unsupported scheme",
		"https://evil.example/key":                  "not in DECO_ALLOWED_AUTHORITIES",
	}
	for release, want := range cases {
		_, err := New(context.Background(), Options{Release: release})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want it to mention %q", release, err, want)
		}
	}
}

func TestLoadHTTPSAuthorities(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"a":1}`)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	release := srv.URL + "/ns/site/decofile.json"
	// Defaults allow localhost, not 127.0.0.1.
	if _, err := New(context.Background(), Options{Release: release, HTTPClient: srv.Client()}); err == nil {
		t.Fatal("127.0.0.1 must not be allowed by the defaults")
	}
	rt, err := New(context.Background(), Options{Release: release, HTTPClient: srv.Client(),
		AllowedAuthorities: ParseAuthorities("configs.deco.cx," + u.Host)})
	if err != nil {
		t.Fatal(err)
	}
	if string(rt.Current().Decofile) != `{"a":1}` {
		t.Fatalf("got %s", rt.Current().Decofile)
	}
	if got := ParseAuthorities(""); len(got) != 4 || got[3] != "localhost" {
		t.Fatalf("defaults: %v", got)
	}
}

func push(t *testing.T, h http.Handler, auth, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/.decofile/reload", strings.NewReader(body))
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestPush(t *testing.T) {
	rt, err := New(context.Background(), Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	h := rt.Handler()
	good := `{"timestamp":"100","source":"operator","decofile":{"k": {"v":1}}}`
	for _, auth := range []string{"", "Token wrong", "Bearer " + token, token} {
		if rec := push(t, h, auth, good); rec.Code != http.StatusUnauthorized {
			t.Fatalf("auth %q: code %d", auth, rec.Code)
		}
	}
	for _, body := range []string{`nope`, `{"decofile":{}}`, `{"timestamp":"x","decofile":{}}`,
		`{"timestamp":"1","decofile":[1]}`, `{"timestamp":"1"}`} {
		if rec := push(t, h, "Token "+token, body); rec.Code != http.StatusBadRequest {
			t.Fatalf("body %s: code %d %s", body, rec.Code, rec.Body)
		}
	}
	if rt.Reloads() != 0 || string(rt.Current().Decofile) != "{}" {
		t.Fatal("rejected requests changed the content")
	}
	rec := push(t, h, "Token "+token, good)
	if rec.Code != http.StatusOK {
		t.Fatalf("code %d %s", rec.Code, rec.Body)
	}
	snap := rt.Current()
	if string(snap.Decofile) != `{"k": {"v":1}}` || snap.Timestamp != 100 || snap.Source != SourceOperator {
		t.Fatalf("snapshot %+v", snap)
	}
	// An older push is acknowledged but never rolls the pod back.
	rec = push(t, h, "Token "+token, `{"timestamp":99,"decofile":{"old":true}}`)
	var reply reloadReply
	_ = json.Unmarshal(rec.Body.Bytes(), &reply)
	if rec.Code != http.StatusOK || reply.Applied || rt.Current().Timestamp != 100 {
		t.Fatalf("older push: %d %s", rec.Code, rec.Body)
	}
	// Info reports what is served.
	req := httptest.NewRequest(http.MethodGet, "/.decofile", nil)
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var info Info
	if err := json.Unmarshal(rec.Body.Bytes(), &info); err != nil || info.Timestamp != 100 || info.ContentHash != hashOf([]byte(`{"k": {"v":1}}`)) {
		t.Fatalf("info %s %v", rec.Body, err)
	}
}

func TestNoTokenDisablesReload(t *testing.T) {
	rt, _ := New(context.Background(), Options{})
	if rec := push(t, rt.Handler(), "Token ", `{"timestamp":"1","decofile":{}}`); rec.Code != http.StatusUnauthorized {
		t.Fatalf("code %d", rec.Code)
	}
}

func TestLongPoll(t *testing.T) {
	dir := t.TempDir()
	tsFile := filepath.Join(dir, "timestamp.txt")
	writeFile(t, filepath.Join(dir, "decofile.json"), `{"v":1}`)
	writeFile(t, tsFile, "100")
	rt, err := New(context.Background(), Options{Release: fileURL(filepath.Join(dir, "decofile.json")), Token: token,
		PollInterval: 20 * time.Millisecond, PollTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rt.Handler())
	defer srv.Close()
	get := func(ts int64, file string) (int, time.Duration) {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/.decofile/reload?timestamp=%d&tsFile=%s", srv.URL, ts, url.QueryEscape(file)), nil)
		req.Header.Set("Authorization", "Token "+token)
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, time.Since(start)
	}
	if code, _ := get(100, "/etc/passwd"); code != http.StatusBadRequest {
		t.Fatalf("other file: %d", code)
	}
	go func() {
		time.Sleep(300 * time.Millisecond)
		writeFile(t, filepath.Join(dir, "decofile.json"), `{"v":2}`)
		writeFile(t, tsFile, "200")
	}()
	code, took := get(200, tsFile)
	if code != http.StatusOK || took < 250*time.Millisecond {
		t.Fatalf("code %d after %s", code, took)
	}
	if snap := rt.Current(); string(snap.Decofile) != `{"v":2}` || snap.Timestamp != 200 || snap.Source != SourceLongPoll {
		t.Fatalf("snapshot %+v", snap)
	}
	code, took = get(300, tsFile)
	if code != http.StatusRequestTimeout || took < 2*time.Second {
		t.Fatalf("timeout: code %d after %s", code, took)
	}
}
