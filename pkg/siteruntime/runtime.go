package siteruntime

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// Defaults of the long-poll reload form, as in the Deco runtime.
const (
	DefaultPollInterval = 2 * time.Second
	DefaultPollTimeout  = 120 * time.Second
)

// InfoPath reports the timestamp and content hash the runtime serves.
const InfoPath = "/.decofile"

// Sources of a Snapshot.
const (
	SourceColdStart = "release"
	SourceOperator  = "operator"
	SourceLongPoll  = "long-poll"
)

// Options configures a Runtime.
type Options struct {
	// Release is the DECO_RELEASE value loaded at start and re-read by the long-poll form.
	// Empty starts with an empty Decofile ({}).
	Release string
	// AllowedAuthorities are the hosts an https:// Release may point to (see ParseAuthorities).
	AllowedAuthorities []string
	// Token is the DECO_RELEASE_RELOAD_TOKEN every reload request must present. Empty disables
	// reloads (every request gets 401), so a pod without a token cannot be reconfigured by anyone.
	Token string
	// PollInterval and PollTimeout drive the long-poll form (defaults 2 s and 120 s).
	PollInterval time.Duration
	PollTimeout  time.Duration
	// MaxBodyBytes bounds a pushed request body, both as sent and once decompressed (default
	// 2 × MaxDecofileBytes).
	MaxBodyBytes int64
	// HTTPClient fetches an https:// Release (default http.DefaultClient).
	HTTPClient *http.Client
	// Validate, when set, is the site's own check of new content, after the runtime's (see
	// Validate): content it refuses is not loaded, and the reload answers 422.
	Validate func(decofile []byte) error
	// Healthy, when set, is asked by GET /.decofile/health; an error answers 503.
	Healthy func() error
}

// OptionsFromEnv reads DECO_RELEASE, DECO_ALLOWED_AUTHORITIES and DECO_RELEASE_RELOAD_TOKEN.
func OptionsFromEnv() Options {
	return Options{
		Release:            os.Getenv(decov1alpha1.EnvRelease),
		AllowedAuthorities: ParseAuthorities(os.Getenv(decov1alpha1.EnvAllowedAuthorities)),
		Token:              os.Getenv(decov1alpha1.EnvReloadToken),
	}
}

// Snapshot is one immutable version of the Decofile the runtime serves.
type Snapshot struct {
	// Timestamp is the version (Unix seconds) the content was delivered with; 0 when unknown.
	Timestamp int64
	// Hash is the SHA-256 (hex) of Decofile, comparable with a Decofile's status.contentHash.
	Hash string
	// Decofile is the merged JSON. Never modify it.
	Decofile []byte
	// Source says how it arrived: SourceColdStart, SourceOperator or SourceLongPoll.
	Source string
	// AppliedAt is when the runtime switched to it.
	AppliedAt time.Time
}

// Runtime holds the current Decofile and serves the reload protocol. It is safe for concurrent use.
type Runtime struct {
	opts    Options
	current atomic.Pointer[Snapshot]
	// applyMu orders appliers so the timestamp never goes backwards; readers never take it.
	applyMu sync.Mutex
	reloads atomic.Int64
}

// New loads o.Release and returns a runtime serving it.
func New(ctx context.Context, o Options) (*Runtime, error) {
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.PollTimeout <= 0 {
		o.PollTimeout = DefaultPollTimeout
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 2 * MaxDecofileBytes
	}
	if o.AllowedAuthorities == nil {
		o.AllowedAuthorities = ParseAuthorities("")
	}
	r := &Runtime{opts: o}
	snap := &Snapshot{Decofile: []byte("{}"), Source: SourceColdStart, AppliedAt: time.Now()}
	if o.Release != "" {
		data, err := Load(ctx, o.Release, o.AllowedAuthorities, o.HTTPClient)
		if err != nil {
			return nil, err
		}
		if err := r.check(data); err != nil {
			return nil, fmt.Errorf("load %s: %w", o.Release, err)
		}
		snap.Decofile = data
		snap.Timestamp = r.siblingTimestamp()
	}
	snap.Hash = hashOf(snap.Decofile)
	r.current.Store(snap)
	return r, nil
}

// siblingTimestamp reads timestamp.txt next to a file:// Release (the ConfigMap mount), or 0.
func (r *Runtime) siblingTimestamp() int64 {
	u, err := url.Parse(r.opts.Release)
	if err != nil || u.Scheme != "file" {
		return 0
	}
	ts, err := readTimestampFile(filepath.Join(filepath.Dir(u.Path), decov1alpha1.KeyTimestamp))
	if err != nil {
		return 0
	}
	return ts
}

// Current is the Decofile being served.
func (r *Runtime) Current() *Snapshot { return r.current.Load() }

// Reloads counts the updates applied since start.
func (r *Runtime) Reloads() int64 { return r.reloads.Load() }

// Apply switches to data (a JSON object) delivered with timestamp ts. An update older than the
// current one is ignored so a late retry cannot roll a pod back; the return says whether data
// is now served.
func (r *Runtime) Apply(ts int64, data []byte, source string) (*Snapshot, bool) {
	r.applyMu.Lock()
	defer r.applyMu.Unlock()
	cur := r.current.Load()
	if ts < cur.Timestamp {
		return cur, false
	}
	next := &Snapshot{Timestamp: ts, Hash: hashOf(data), Decofile: data, Source: source, AppliedAt: time.Now()}
	r.current.Store(next)
	r.reloads.Add(1)
	return next, true
}

func hashOf(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// Handler serves POST and GET /.decofile/reload, GET /.decofile and GET /.decofile/health.
func (r *Runtime) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+decov1alpha1.ReloadPath, r.handlePush)
	mux.HandleFunc("GET "+decov1alpha1.ReloadPath, r.handleLongPoll)
	mux.HandleFunc("GET "+InfoPath, r.handleInfo)
	mux.HandleFunc("GET "+HealthPath, r.handleHealth)
	return mux
}

// authorized compares the presented token with the configured one in constant time. Both are
// hashed first so neither their content nor their length leaks through timing.
func (r *Runtime) authorized(req *http.Request) bool {
	if r.opts.Token == "" {
		return false
	}
	got, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Token ")
	if !ok {
		return false
	}
	a, b := sha256.Sum256([]byte(strings.TrimSpace(got))), sha256.Sum256([]byte(r.opts.Token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// reloadReply answers a reload. Loaded reports that the content was accepted (the operator
// treats {"loaded":false} or a 422 as a pod that could not load it); Applied that it is now
// served (false for an update older than the one served). Loaded comes first so that a reader
// of only the start of the answer sees it.
type reloadReply struct {
	Loaded      bool   `json:"loaded"`
	Applied     bool   `json:"applied"`
	Timestamp   int64  `json:"timestamp"`
	ContentHash string `json:"contentHash"`
	Message     string `json:"message,omitempty"`
}

type errorReply struct {
	Error string `json:"error"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, errorReply{Error: fmt.Sprintf(format, args...)})
}

// pushBody is the operator's POST body. Decofile stays raw: it is stored and hashed exactly as sent.
type pushBody struct {
	Timestamp json.RawMessage `json:"timestamp"`
	Source    string          `json:"source"`
	Decofile  json.RawMessage `json:"decofile"`
}

func (r *Runtime) handlePush(w http.ResponseWriter, req *http.Request) {
	w.Header().Set("Accept-Encoding", AcceptEncoding)
	if !r.authorized(req) {
		writeError(w, http.StatusUnauthorized, "missing or wrong reload token (Authorization: Token …)")
		return
	}
	raw, err := readBody(w, req, r.opts.MaxBodyBytes)
	if err != nil {
		var be *bodyError
		if errors.As(err, &be) {
			writeError(w, be.code, "%s", be.msg)
			return
		}
		writeError(w, http.StatusBadRequest, "read body: %v", err)
		return
	}
	var body pushBody
	if err := json.Unmarshal(raw, &body); err != nil {
		writeError(w, http.StatusBadRequest, "body is not JSON: %v", err)
		return
	}
	ts, err := parseTimestamp(body.Timestamp)
	if err != nil {
		writeError(w, http.StatusBadRequest, "timestamp: %v", err)
		return
	}
	if err := checkObject(body.Decofile); err != nil {
		writeError(w, http.StatusBadRequest, "decofile: %v", err)
		return
	}
	if err := r.check(body.Decofile); err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, reloadReply{Loaded: false, Timestamp: r.Current().Timestamp, ContentHash: r.Current().Hash, Message: err.Error()})
		return
	}
	snap, applied := r.Apply(ts, body.Decofile, SourceOperator)
	reply := reloadReply{Loaded: true, Applied: applied, Timestamp: snap.Timestamp, ContentHash: snap.Hash}
	if !applied {
		reply.Message = fmt.Sprintf("ignored: timestamp %d is older than the served %d", ts, snap.Timestamp)
	}
	writeJSON(w, http.StatusOK, reply)
}

// parseTimestamp accepts "1731598481" or 1731598481.
func parseTimestamp(raw json.RawMessage) (int64, error) {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return 0, errors.New("missing")
	}
	if unq, err := strconv.Unquote(s); err == nil {
		s = unq
	}
	ts, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || ts < 0 {
		return 0, fmt.Errorf("%s is not Unix seconds", raw)
	}
	return ts, nil
}

func (r *Runtime) handleLongPoll(w http.ResponseWriter, req *http.Request) {
	if !r.authorized(req) {
		writeError(w, http.StatusUnauthorized, "missing or wrong reload token (Authorization: Token …)")
		return
	}
	q := req.URL.Query()
	want, err := strconv.ParseInt(q.Get("timestamp"), 10, 64)
	if err != nil || want < 0 {
		writeError(w, http.StatusBadRequest, "timestamp query parameter must be Unix seconds, got %q", q.Get("timestamp"))
		return
	}
	tsFile := q.Get("tsFile")
	// Only an absolute timestamp.txt may be named: the caller must not make the pod read other files.
	if !filepath.IsAbs(tsFile) || filepath.Base(tsFile) != decov1alpha1.KeyTimestamp {
		writeError(w, http.StatusBadRequest, "tsFile must be an absolute path to a %s, got %q", decov1alpha1.KeyTimestamp, tsFile)
		return
	}
	tsFile = filepath.Clean(tsFile)

	ctx, cancel := context.WithTimeout(req.Context(), r.opts.PollTimeout)
	defer cancel()
	tick := time.NewTicker(r.opts.PollInterval)
	defer tick.Stop()
	for {
		if ts, err := readTimestampFile(tsFile); err == nil && ts >= want {
			data, err := r.loadFromDisk(ctx, filepath.Dir(tsFile))
			if err != nil {
				writeError(w, http.StatusInternalServerError, "timestamp %d reached but reloading failed: %v", ts, err)
				return
			}
			if err := r.check(data); err != nil {
				writeJSON(w, http.StatusUnprocessableEntity, reloadReply{Loaded: false, Timestamp: r.Current().Timestamp, ContentHash: r.Current().Hash, Message: err.Error()})
				return
			}
			snap, _ := r.Apply(ts, data, SourceLongPoll)
			writeJSON(w, http.StatusOK, reloadReply{Loaded: true, Applied: snap.Timestamp == ts, Timestamp: snap.Timestamp, ContentHash: snap.Hash})
			return
		}
		select {
		case <-ctx.Done():
			writeError(w, http.StatusRequestTimeout, "%s did not reach timestamp %d within %s", tsFile, want, r.opts.PollTimeout)
			return
		case <-tick.C:
		}
	}
}

// loadFromDisk re-reads the Release, or, when it is not set or not a file, the decofile.bin or
// decofile.json next to the timestamp file.
func (r *Runtime) loadFromDisk(ctx context.Context, dir string) ([]byte, error) {
	if strings.HasPrefix(r.opts.Release, "file://") {
		return Load(ctx, r.opts.Release, r.opts.AllowedAuthorities, r.opts.HTTPClient)
	}
	for _, key := range []string{decov1alpha1.KeyBin, decov1alpha1.KeyJSON} {
		p := filepath.Join(dir, key)
		if _, err := os.Stat(p); err == nil {
			return Load(ctx, (&url.URL{Scheme: "file", Path: p}).String(), r.opts.AllowedAuthorities, r.opts.HTTPClient)
		}
	}
	if r.opts.Release != "" {
		return Load(ctx, r.opts.Release, r.opts.AllowedAuthorities, r.opts.HTTPClient)
	}
	return nil, fmt.Errorf("no %s or %s in %s", decov1alpha1.KeyBin, decov1alpha1.KeyJSON, dir)
}

// Info is the answer of GET /.decofile.
type Info struct {
	Timestamp   int64     `json:"timestamp"`
	ContentHash string    `json:"contentHash"`
	Bytes       int       `json:"bytes"`
	Source      string    `json:"source"`
	AppliedAt   time.Time `json:"appliedAt"`
	Reloads     int64     `json:"reloads"`
}

func (r *Runtime) handleInfo(w http.ResponseWriter, req *http.Request) {
	snap := r.Current()
	if v, _ := strconv.ParseBool(req.URL.Query().Get("content")); v {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.Copy(w, bytes.NewReader(snap.Decofile))
		return
	}
	writeJSON(w, http.StatusOK, Info{
		Timestamp: snap.Timestamp, ContentHash: snap.Hash, Bytes: len(snap.Decofile),
		Source: snap.Source, AppliedAt: snap.AppliedAt, Reloads: r.Reloads(),
	})
}
