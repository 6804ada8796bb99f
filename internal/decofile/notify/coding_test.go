package notify_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/notify"
	"github.com/siteops/siteops/pkg/siteruntime"
)

// bigContent is a Decofile of about 64 KiB, worth compressing, distinct per version.
func bigContent(version int) []byte {
	return fmt.Appendf(nil, `{"version":%d,"pages":%s}`, version, benchPayload(64<<10))
}

// codingLog records the Content-Encoding of every request a pod receives.
type codingLog struct {
	mu   sync.Mutex
	seen []string
}

func (l *codingLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.seen = append(l.seen, r.Header.Get("Content-Encoding"))
		l.mu.Unlock()
		h.ServeHTTP(w, r)
	})
}

func (l *codingLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.seen
	l.seen = nil
	return out
}

// denoLike answers the way the published Deno runtime does: it parses the body as JSON whatever
// its Content-Encoding (400 when that fails) and advertises no Accept-Encoding.
func denoLike() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		if !json.Valid(raw) {
			http.Error(w, "bad body", http.StatusBadRequest)
		}
	})
}

// publish runs one rollout of content at ts to pods and fails the test unless every pod got it.
func publish(t *testing.T, n *notify.Notifier, ts int64, content []byte, pods ...notify.Pod) notify.Result {
	t.Helper()
	res := n.Run(context.Background(), notify.Rollout{ID: fmt.Sprint("timestamp:", ts), Timestamp: ts, Token: token,
		Body: notify.PushBody(ts, content), Pods: pods})
	if !res.Succeeded() || res.Notified != len(pods) {
		t.Fatalf("publish %d: %+v %+v", ts, res.Progress, res.Pods)
	}
	return res
}

// A pod of the reference runtime advertises br on its answers: the first publish reaches it
// plain, every later one brotli-compressed, and it serves exactly the published content.
func TestAcceptingPodGetsBrotli(t *testing.T) {
	rt, err := siteruntime.New(context.Background(), siteruntime.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	var log codingLog
	pod := serve(t, "pod", log.wrap(rt.Handler()))
	pod.UID = "uid-accepting"
	n := notify.New(notify.Config{})

	first := publish(t, n, 1, bigContent(1), pod)
	if got := log.take(); !slices.Equal(got, []string{""}) || first.Pods[0].Coding != notify.Identity {
		t.Fatalf("first publish: pod saw codings %q, result %s; want one plain request", got, first.Pods[0].Coding)
	}
	for v := 2; v <= 3; v++ {
		content := bigContent(v)
		res := publish(t, n, int64(v), content, pod)
		if got := log.take(); !slices.Equal(got, []string{"br"}) || res.Pods[0].Coding != notify.Brotli {
			t.Fatalf("publish %d: pod saw codings %q, result %s; want one br request", v, got, res.Pods[0].Coding)
		}
		if s := rt.Current(); s.Hash != sha(content) || s.Timestamp != int64(v) {
			t.Fatalf("publish %d: pod serves ts %d hash %s, want %s", v, s.Timestamp, s.Hash, sha(content))
		}
		if plain := len(notify.PushBody(int64(v), content)); res.BodyBytes*4 > int64(plain) {
			t.Fatalf("publish %d sent %d body bytes for a %d-byte body: not compressed", v, res.BodyBytes, plain)
		}
	}
}

// A pod whose annotation names gzip gets gzip from the first publish, without having to answer
// once first.
func TestAnnotatedPodGetsGzipAtOnce(t *testing.T) {
	rt, err := siteruntime.New(context.Background(), siteruntime.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	var log codingLog
	pod := serve(t, "pod", log.wrap(rt.Handler()))
	pod.AcceptEncoding = "gzip" // as read from decov1alpha1.AnnotationReloadAcceptEncoding
	content := bigContent(1)
	res := publish(t, notify.New(notify.Config{}), 1, content, pod)
	if got := log.take(); !slices.Equal(got, []string{"gzip"}) || res.Pods[0].Coding != notify.Gzip {
		t.Fatalf("pod annotated %s=gzip saw codings %q (result %s)", decov1alpha1.AnnotationReloadAcceptEncoding, got, res.Pods[0].Coding)
	}
	if rt.Current().Hash != sha(content) {
		t.Fatal("pod does not serve the published content")
	}
}

// A pod like the published Deno runtime never says it accepts a compressed body: it gets plain
// JSON on every publish, next to a pod that gets br in the same rollout.
func TestDenoLikePodGetsPlainJSON(t *testing.T) {
	var denoLog, rtLog codingLog
	deno := serve(t, "deno", denoLog.wrap(denoLike()))
	deno.UID = "uid-deno"
	rt, err := siteruntime.New(context.Background(), siteruntime.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	ref := serve(t, "reference", rtLog.wrap(rt.Handler()))
	ref.UID = "uid-reference"
	n := notify.New(notify.Config{})
	for v := 1; v <= 3; v++ {
		publish(t, n, int64(v), bigContent(v), deno, ref)
	}
	if got := denoLog.take(); !slices.Equal(got, []string{"", "", ""}) {
		t.Fatalf("Deno-like pod saw codings %q, want plain JSON three times", got)
	}
	if got := rtLog.take(); !slices.Equal(got, []string{"", "br", "br"}) {
		t.Fatalf("reference pod saw codings %q, want plain then br", got)
	}
}

// A pod that claims br (its annotation) but answers 415 to a br body gets the same publish
// plain at once, and plain from then on: the refusal is remembered for its UID.
func TestRefusedCodingFallsBackAndIsRemembered(t *testing.T) {
	var log codingLog
	pod := serve(t, "pod", log.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Encoding") != "" {
			http.Error(w, "unsupported", http.StatusUnsupportedMediaType)
			return
		}
		denoLike().ServeHTTP(w, r)
	})))
	pod.UID, pod.AcceptEncoding = "uid-refusing", "br, gzip"
	n := notify.New(notify.Config{})

	res := publish(t, n, 1, bigContent(1), pod)
	if got := log.take(); !slices.Equal(got, []string{"br", ""}) || res.Pods[0].Coding != notify.Identity || res.Pods[0].Attempts != 1 {
		t.Fatalf("first publish: pod saw codings %q, result %+v; want br refused then plain in one attempt", got, res.Pods[0])
	}
	publish(t, n, 2, bigContent(2), pod)
	if got := log.take(); !slices.Equal(got, []string{"gzip", ""}) {
		t.Fatalf("second publish: pod saw codings %q; want gzip (not yet refused) then plain", got)
	}
	publish(t, n, 3, bigContent(3), pod)
	if got := log.take(); !slices.Equal(got, []string{""}) {
		t.Fatalf("third publish: pod saw codings %q; want plain only, both codings being refused", got)
	}
}

// DisableCompression sends plain JSON even to pods that accept br.
func TestDisableCompression(t *testing.T) {
	rt, err := siteruntime.New(context.Background(), siteruntime.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	var log codingLog
	pod := serve(t, "pod", log.wrap(rt.Handler()))
	pod.UID, pod.AcceptEncoding = "uid-plain", "br"
	n := notify.New(notify.Config{DisableCompression: true})
	publish(t, n, 1, bigContent(1), pod)
	publish(t, n, 2, bigContent(2), pod)
	if got := log.take(); !slices.Equal(got, []string{"", ""}) {
		t.Fatalf("pod saw codings %q with compression disabled", got)
	}
}

func TestParseAcceptEncoding(t *testing.T) {
	for in, want := range map[string]notify.Coding{
		"":                       notify.Identity,
		"br, gzip":               notify.Brotli | notify.Gzip,
		"GZIP;q=0.5":             notify.Gzip,
		"br;q=0, gzip":           notify.Gzip,
		"br;q=0.0":               notify.Identity,
		"identity, *, deflate":   notify.Identity,
		" x-gzip , zstd, br;q=1": notify.Gzip | notify.Brotli,
		"br;q=bogus":             notify.Identity,
	} {
		if got := notify.ParseAcceptEncoding(in); got != want {
			t.Errorf("ParseAcceptEncoding(%q) = %v, want %v", in, got, want)
		}
	}
}
