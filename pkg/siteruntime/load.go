// Package siteruntime is a reference implementation, in Go, of the pod side of the Decofile
// protocol that the Deco site runtime speaks: it loads DECO_RELEASE at cold start, accepts pushed
// updates on POST /.decofile/reload, waits for a mounted timestamp.txt on the older long-poll
// GET /.decofile/reload form, and reports what it serves on GET /.decofile.
//
// Go sites can embed it (New + Handler); `siteops site serve` runs it stand-alone for demos and
// tests.
package siteruntime

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/andybalholm/brotli"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// MaxDecofileBytes bounds a loaded or pushed Decofile (decoded JSON), so a bad source cannot
// exhaust the site's memory.
const MaxDecofileBytes = 256 << 20

// ParseAuthorities splits a DECO_ALLOWED_AUTHORITIES value. An empty value means the runtime
// defaults (decov1alpha1.DefaultAllowedAuthorities), exactly like the Deco runtime: a set value
// replaces the defaults rather than adding to them.
func ParseAuthorities(value string) []string {
	if strings.TrimSpace(value) == "" {
		value = decov1alpha1.DefaultAllowedAuthorities
	}
	var out []string
	for a := range strings.SplitSeq(value, ",") {
		if a = strings.ToLower(strings.TrimSpace(a)); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// authorityAllowed reports whether the URL's host (with or without its port) is listed.
func authorityAllowed(u *url.URL, allowed []string) bool {
	host := strings.ToLower(u.Host)
	hostname := strings.ToLower(u.Hostname())
	return slices.Contains(allowed, host) || slices.Contains(allowed, hostname)
}

// Load reads the Decofile JSON that release (a DECO_RELEASE value) points to:
// file://…/x.json as is, file://…/x.bin as base64 of brotli of the JSON, and http(s)://host/key
// when host is in allowed. The result is checked to be a JSON object.
func Load(ctx context.Context, release string, allowed []string, client *http.Client) ([]byte, error) {
	u, err := url.Parse(release)
	if err != nil {
		return nil, fmt.Errorf("parse %s %q: %w", decov1alpha1.EnvRelease, release, err)
	}
	var data []byte
	switch u.Scheme {
	case "file":
		data, err = loadFile(u.Path)
	case "https", "http":
		if !authorityAllowed(u, allowed) {
			return nil, fmt.Errorf("load %s: host %q is not in %s (%s); add it there",
				release, u.Host, decov1alpha1.EnvAllowedAuthorities, strings.Join(allowed, ","))
		}
		data, err = loadHTTP(ctx, u.String(), client)
	default:
		return nil, fmt.Errorf("load %s: unsupported scheme %q (want file://, https://)", release, u.Scheme)
	}
	if err != nil {
		return nil, err
	}
	if err := checkObject(data); err != nil {
		return nil, fmt.Errorf("load %s: %w", release, err)
	}
	return data, nil
}

func loadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open decofile: %w", err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, MaxDecofileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read decofile %s: %w", path, err)
	}
	if len(raw) > MaxDecofileBytes {
		return nil, fmt.Errorf("decofile %s is larger than %d bytes", path, MaxDecofileBytes)
	}
	if filepath.Ext(path) == ".bin" {
		return DecodeBin(raw)
	}
	return raw, nil
}

// DecodeBin turns the content of a decofile.bin (base64 of brotli of the JSON) into the JSON.
func DecodeBin(bin []byte) ([]byte, error) {
	dec := base64.NewDecoder(base64.StdEncoding, bytes.NewReader(bytes.TrimSpace(bin)))
	out, err := io.ReadAll(io.LimitReader(brotli.NewReader(dec), MaxDecofileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("decode decofile.bin (base64 of brotli): %w", err)
	}
	if len(out) > MaxDecofileBytes {
		return nil, fmt.Errorf("decoded decofile.bin is larger than %d bytes", MaxDecofileBytes)
	}
	return out, nil
}

func loadHTTP(ctx context.Context, u string, client *http.Client) ([]byte, error) {
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("build request for %s: %w", u, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch decofile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch decofile %s: HTTP %s", u, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxDecofileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read decofile from %s: %w", u, err)
	}
	if len(data) > MaxDecofileBytes {
		return nil, fmt.Errorf("decofile at %s is larger than %d bytes", u, MaxDecofileBytes)
	}
	return data, nil
}

// checkObject makes sure data is one JSON object, the shape every Decofile has.
func checkObject(data []byte) error {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '{' || !json.Valid(trimmed) {
		return errors.New("content is not a JSON object")
	}
	return nil
}

// readTimestampFile reads a timestamp.txt (Unix seconds).
func readTimestampFile(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, 64))
	if err != nil {
		return 0, err
	}
	ts, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("timestamp file %s: %w", path, err)
	}
	return ts, nil
}
