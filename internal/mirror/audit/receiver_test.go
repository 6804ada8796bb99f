package audit

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/siteops/siteops/internal/mirror/store"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

func event(verb, user, uid, rv string, mut func(*auditv1.Event)) auditv1.Event {
	ev := auditv1.Event{
		Level:          auditv1.LevelRequestResponse,
		AuditID:        types.UID("a-" + uid + "-" + rv),
		Stage:          auditv1.StageResponseComplete,
		RequestURI:     "/api/v1/namespaces/ns/configmaps/cm",
		Verb:           verb,
		User:           authnv1.UserInfo{Username: user},
		ObjectRef:      &auditv1.ObjectReference{Resource: "configmaps", Namespace: "ns", Name: "cm-" + uid, APIVersion: "v1"},
		ResponseStatus: &metav1.Status{Code: 200},
		ResponseObject: &runtime.Unknown{Raw: []byte(fmt.Sprintf(`{"metadata":{"name":"cm-%s","namespace":"ns","uid":%q,"resourceVersion":%q}}`, uid, uid, rv))},
	}
	if mut != nil {
		mut(&ev)
	}
	return ev
}

func eventList(evs ...auditv1.Event) []byte {
	b, _ := json.Marshal(auditv1.EventList{TypeMeta: metav1.TypeMeta{APIVersion: "audit.k8s.io/v1", Kind: "EventList"}, Items: evs})
	return b
}

func TestAccept(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ev     auditv1.Event
		ok     bool
		reason string
	}{
		{"create", event("create", "u", "1", "1", nil), true, ""},
		{"deletecollection", event("deletecollection", "u", "1", "1", nil), true, ""},
		{"scale subresource", event("patch", "u", "1", "1", func(e *auditv1.Event) { e.ObjectRef.Subresource = "scale" }), true, ""},
		{"request received stage", event("create", "u", "1", "1", func(e *auditv1.Event) { e.Stage = auditv1.StageRequestReceived }), false, reasonStage},
		{"get", event("get", "u", "1", "1", nil), false, reasonVerb},
		{"watch", event("watch", "u", "1", "1", nil), false, reasonVerb},
		{"conflict", event("update", "u", "1", "1", func(e *auditv1.Event) { e.ResponseStatus.Code = 409 }), false, reasonStatus},
		{"no status", event("update", "u", "1", "1", func(e *auditv1.Event) { e.ResponseStatus = nil }), false, reasonStatus},
		{"status subresource", event("update", "u", "1", "1", func(e *auditv1.Event) { e.ObjectRef.Subresource = "status" }), false, reasonSubresource},
		{"dry run", event("create", "u", "1", "1", func(e *auditv1.Event) { e.RequestURI += "?dryRun=All&fieldManager=kubectl" }), false, reasonDryRun},
		{"broken query", event("create", "u", "1", "1", func(e *auditv1.Event) { e.RequestURI += "?a=%zz" }), false, reasonDryRun},
		{"other query", event("create", "u", "1", "1", func(e *auditv1.Event) { e.RequestURI += "?fieldManager=kubectl" }), true, ""},
		{"non-resource", event("create", "u", "1", "1", func(e *auditv1.Event) { e.ObjectRef = nil }), false, reasonNoObject},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, reason := Accept(&tc.ev)
			if ok != tc.ok || reason != tc.reason {
				t.Fatalf("Accept = %v %q, want %v %q", ok, reason, tc.ok, tc.reason)
			}
		})
	}
}

// nopRecorder accepts every fact without storing it (fuzzing needs no server).
type nopRecorder struct {
	mu sync.Mutex
	n  int
}

func (r *nopRecorder) RecordFact(context.Context, string, auditv1.Event) error {
	r.mu.Lock()
	r.n++
	r.mu.Unlock()
	return nil
}
func (r *nopRecorder) RecordDeleteCollectionFacts(context.Context, string, auditv1.Event) error {
	return nil
}
func (r *nopRecorder) Announce(context.Context, string, []auditv1.Event) error { return nil }

func post(h http.Handler, path string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestHandlerRejectsBadRequests(t *testing.T) {
	rec := &nopRecorder{}
	h := &Handler{Recorder: rec, MaxBodyBytes: 4096}
	good := eventList(event("create", "alice", "u1", "5", nil))
	for _, tc := range []struct {
		name   string
		method string
		path   string
		ctype  string
		body   []byte
		code   int
	}{
		{"ok", http.MethodPost, "/audit-webhook/prod", "application/json", good, 200},
		{"no route", http.MethodPost, "/audit-webhook/", "application/json", good, 404},
		{"route with colon", http.MethodPost, "/audit-webhook/a:b", "application/json", good, 404},
		{"nested route", http.MethodPost, "/audit-webhook/a/b", "application/json", good, 404},
		{"get", http.MethodGet, "/audit-webhook/prod", "", nil, 405},
		{"yaml", http.MethodPost, "/audit-webhook/prod", "application/yaml", good, 415},
		{"malformed json", http.MethodPost, "/audit-webhook/prod", "application/json", []byte(`{"kind":"EventList",`), 400},
		{"wrong kind", http.MethodPost, "/audit-webhook/prod", "application/json", []byte(`{"apiVersion":"audit.k8s.io/v1","kind":"Event"}`), 400},
		{"old version", http.MethodPost, "/audit-webhook/prod", "application/json", []byte(`{"apiVersion":"audit.k8s.io/v1beta1","kind":"EventList","items":[]}`), 400},
		{"oversize", http.MethodPost, "/audit-webhook/prod", "application/json", bytes.Repeat([]byte(" "), 5000), 413},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(tc.method, tc.path, bytes.NewReader(tc.body))
			if tc.ctype != "" {
				req.Header.Set("Content-Type", tc.ctype)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != tc.code {
				t.Fatalf("status %d (%s), want %d", w.Code, strings.TrimSpace(w.Body.String()), tc.code)
			}
		})
	}
	if rec.n != 1 {
		t.Fatalf("recorded %d facts, want 1 (only the good request)", rec.n)
	}
}

func FuzzHandler(f *testing.F) {
	f.Add(eventList(event("create", "alice", "u1", "5", nil)))
	f.Add(eventList(event("deletecollection", "bob", "u1", "5", func(e *auditv1.Event) {
		e.ResponseObject = &runtime.Unknown{Raw: []byte(`{"items":[{"metadata":{"uid":"x","name":"y"}}]}`)}
	})))
	f.Add([]byte(`{"apiVersion":"audit.k8s.io/v1","kind":"EventList","items":[{"stage":"ResponseComplete","verb":"create","objectRef":null,"responseStatus":{"code":201}}]}`))
	f.Add([]byte(`{"apiVersion":"audit.k8s.io/v1","kind":"EventList","items":[{"requestURI":"/x?dryRun=%","stage":"ResponseComplete","verb":"patch","objectRef":{"resource":"a"},"responseStatus":{"code":200},"responseObject":[1,2]}]}`))
	f.Add([]byte(`null`))
	f.Add([]byte{0xff, 0xfe})
	f.Fuzz(func(t *testing.T, body []byte) {
		h := &Handler{Recorder: &nopRecorder{}, MaxBodyBytes: 1 << 16}
		w := post(h, "/audit-webhook/fuzz", body)
		switch w.Code {
		case 200, 400, 413:
		default:
			t.Fatalf("status %d for %q", w.Code, body)
		}
	})
}

// TestHandlerStoresFactsAndFailsWithStore runs the handler against a real Redis: accepted events
// become facts, filtered ones do not, and a dead store answers 503 so the API server retries.
func TestHandlerStoresFactsAndFailsWithStore(t *testing.T) {
	srv := testenv.Redis(t, servers.RedisOptions{})
	s, err := store.NewRedisStore(store.RedisStoreConfig{Addr: srv.Addr, KeyPrefix: "rcv"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	idx := s.AttributionIndex(time.Minute)
	ann := &announcements{}
	subCtx, stopSub := context.WithCancel(context.Background())
	defer stopSub()
	go func() { _ = idx.Subscribe(subCtx, "prod", ann) }()
	testenv.Eventually(t, 5*time.Second, func() error {
		if _, n := ann.snapshot(); n == 0 {
			return fmt.Errorf("not subscribed yet")
		}
		return nil
	})
	woke := 0
	h := &Handler{Recorder: idx, OnRecorded: func() { woke++ }}
	recorded0 := testutil.ToFloat64(AuditEvents.WithLabelValues("recorded"))
	filtered0 := testutil.ToFloat64(AuditEvents.WithLabelValues("filtered"))
	items0 := testutil.ToFloat64(FactsRecorded.WithLabelValues("deletecollection"))
	body := eventList(
		event("create", "alice", "u1", "5", nil),
		event("update", "bob", "u2", "6", func(e *auditv1.Event) { e.RequestURI += "?dryRun=All" }),
		event("get", "carol", "u3", "7", nil),
		event("deletecollection", "dave", "", "", func(e *auditv1.Event) {
			e.ObjectRef.Name = ""
			e.ResponseObject = &runtime.Unknown{Raw: []byte(`{"kind":"ConfigMapList","items":[{"metadata":{"name":"x","namespace":"ns","uid":"ux","resourceVersion":"3"}}]}`)}
		}),
	)
	if w := post(h, "/audit-webhook/prod", body); w.Code != 200 {
		t.Fatalf("status %d: %s", w.Code, w.Body)
	}
	if woke != 1 {
		t.Fatalf("OnRecorded called %d times", woke)
	}
	if d := testutil.ToFloat64(AuditEvents.WithLabelValues("recorded")) - recorded0; d != 2 {
		t.Errorf("recorded events +%v, want +2", d)
	}
	if d := testutil.ToFloat64(AuditEvents.WithLabelValues("filtered")) - filtered0; d != 2 {
		t.Errorf("filtered events +%v, want +2 (dry run, get)", d)
	}
	if d := testutil.ToFloat64(FactsRecorded.WithLabelValues("deletecollection")) - items0; d != 1 {
		t.Errorf("deletecollection facts +%v, want +1", d)
	}
	cm := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	ctx := context.Background()
	if r := idx.LookupAuthorResolution(ctx, "prod", cm, "u1", "5", true); r.Result != store.AttributionExactUser || r.Fact.Author != "alice" {
		t.Fatalf("create fact = %+v", r)
	}
	if r := idx.LookupAuthorResolution(ctx, "prod", cm, "u2", "6", false); r.Result != store.AttributionAbsent {
		t.Fatalf("dry run stored a fact: %+v", r)
	}
	if r := idx.LookupAuthorResolution(ctx, "prod", cm, "ux", "9", false); r.Result != store.AttributionExactDeleteCollectionItem || r.Fact.Author != "dave" {
		t.Fatalf("deletecollection item = %+v", r)
	}
	if n, _ := idx.CountFacts(ctx); n != 4 { // exact + :last of u1, :last + deleter of ux
		t.Fatalf("stored %d facts, want 4", n)
	}
	// The batch was announced once, naming what it stored, so waiting events wake at once.
	testenv.Eventually(t, 5*time.Second, func() error {
		toks, _ := ann.snapshot()
		if len(toks) == 0 {
			return fmt.Errorf("no announcement")
		}
		if want := store.WakeTokens(store.Query{GVR: cm, UID: "u1", RV: "5"})[0]; !slices.Contains(toks, want) {
			return fmt.Errorf("announced %q, want %q among them", toks, want)
		}
		if want := store.WakeTokens(store.Query{GVR: cm, UID: "ux", Removal: true})[0]; !slices.Contains(toks, want) {
			return fmt.Errorf("announced %q, want %q among them", toks, want)
		}
		return nil
	})
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	h.StoreTimeout = 3 * time.Second
	if w := post(h, "/audit-webhook/prod", eventList(event("create", "alice", "u9", "9", nil))); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("status with Redis down = %d, want 503", w.Code)
	}
}

// announcements records what a route's subscription hears.
type announcements struct {
	mu         sync.Mutex
	tokens     []string
	subscribed int
}

func (a *announcements) Wake(tokens []string) {
	a.mu.Lock()
	a.tokens = append(a.tokens, tokens...)
	a.mu.Unlock()
}

func (a *announcements) Subscribed() {
	a.mu.Lock()
	a.subscribed++
	a.mu.Unlock()
}

func (a *announcements) snapshot() ([]string, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.tokens), a.subscribed
}

// liveReceiver is a receiver served over real mTLS on a loopback address, storing facts in a
// real Redis under a key prefix.
type liveReceiver struct {
	redisAddr string
	ip        string
	certs     *testenv.MTLS
	// good is the API server's client TLS configuration.
	good *tls.Config
	url  string
}

func serveReceiver(t *testing.T, prefix string, maxBody int64) *liveReceiver {
	t.Helper()
	srv := testenv.Redis(t, servers.RedisOptions{})
	s, err := store.NewRedisStore(store.RedisStoreConfig{Addr: srv.Addr, KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	l := testenv.LoopbackListener(t)
	ip := strings.Split(l.Addr().String(), ":")[0]
	certs := testenv.NewMTLS(t, "kube-apiserver", ip)
	r, err := NewReceiver(Config{
		CertDir:      certs.CertDir,
		ClientCAFile: certs.CAFile,
		ClientNames:  []string{"kube-apiserver"},
		Handler:      &Handler{Recorder: s.AttributionIndex(time.Minute), MaxBodyBytes: maxBody},
		Listener:     l,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	lr := &liveReceiver{redisAddr: srv.Addr, ip: ip, certs: certs, good: certs.ClientTLS(t)}
	lr.url = "https://" + l.Addr().String() + "/audit-webhook/prod"
	testenv.Eventually(t, 5*time.Second, func() error {
		code, err := lr.do(lr.good, eventList(event("create", "alice", "u1", "5", nil)))
		if err != nil || code != 200 {
			return fmt.Errorf("status %d, %w", code, err)
		}
		return nil
	})
	return lr
}

// do posts body with the client TLS configuration cfg.
func (lr *liveReceiver) do(cfg *tls.Config, body []byte) (int, error) {
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 5 * time.Second}
	resp, err := c.Post(lr.url, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// keys lists the Redis keys matching pattern.
func (lr *liveReceiver) keys(t *testing.T, pattern string) []string {
	t.Helper()
	raw := redis.NewClient(&redis.Options{Addr: lr.redisAddr})
	defer raw.Close()
	keys, err := raw.Keys(context.Background(), pattern).Result()
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestReceiverMutualTLS serves the receiver over real mTLS on a loopback address.
func TestReceiverMutualTLS(t *testing.T) {
	lr := serveReceiver(t, "mtls", 64<<10)
	ip, certs, good, do := lr.ip, lr.certs, lr.good, lr.do
	// No client certificate: the handshake fails.
	noCert := good.Clone()
	noCert.Certificates = nil
	if code, err := do(noCert, eventList()); err == nil {
		t.Fatalf("client without certificate got status %d", code)
	}
	// A certificate from another CA is rejected as well.
	other := testenv.NewMTLS(t, "intruder", ip)
	pair, _ := tls.X509KeyPair(other.ClientCertPEM, other.ClientKeyPEM)
	foreign := good.Clone()
	foreign.Certificates = []tls.Certificate{pair}
	if code, err := do(foreign, eventList()); err == nil {
		t.Fatalf("client with a foreign certificate got status %d", code)
	}
	// A server certificate from the right CA but used as a client certificate lacks clientAuth.
	srvPair, _ := tls.LoadX509KeyPair(certs.CertDir+"/tls.crt", certs.CertDir+"/tls.key")
	wrongUsage := good.Clone()
	wrongUsage.Certificates = []tls.Certificate{srvPair}
	if code, err := do(wrongUsage, eventList()); err == nil {
		t.Fatalf("client with a serving certificate got status %d", code)
	}
	// Oversize bodies and malformed JSON are refused and store nothing.
	if code, err := do(good, bytes.Repeat([]byte("x"), 70<<10)); err != nil || code != http.StatusRequestEntityTooLarge {
		t.Fatalf("oversize body: %d, %v", code, err)
	}
	if code, err := do(good, []byte(`{"apiVersion":"audit.k8s.io/v1","kind":"EventList","items":[{"verb":}]}`)); err != nil || code != http.StatusBadRequest {
		t.Fatalf("malformed body: %d, %v", code, err)
	}
	if keys := lr.keys(t, "mtls:*"); len(keys) != 2 {
		t.Fatalf("keys = %q, want the two of the accepted create", keys)
	}
}

// TestReceiverRefusesOtherClientNames: a client certificate from the right CA is not enough; its
// common name or a DNS name must be one of --audit-client-names.
func TestReceiverRefusesOtherClientNames(t *testing.T) {
	lr := serveReceiver(t, "names", 0)
	certs, good, do := lr.certs, lr.good, lr.do
	// A pod holding any certificate of the same CA (another client of the cluster CA) forges a
	// fact for a change it wants credited to someone else.
	crt, key := certs.Issue(t, "system:node:worker-1", x509.ExtKeyUsageClientAuth, nil)
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	intruder := good.Clone()
	intruder.Certificates = []tls.Certificate{pair}
	code, err := do(intruder, eventList(event("create", "admin", "u2", "6", nil)))
	if err == nil && code == http.StatusOK {
		t.Fatalf("a client certificate named system:node:worker-1 was accepted (status %d)", code)
	}
	if keys := lr.keys(t, "names:*u2*"); len(keys) != 0 {
		t.Fatalf("the refused client stored facts: %q", keys)
	}
}
