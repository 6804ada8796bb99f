package rollout

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/siteops/siteops/internal/decofile/notify"
)

// TestCheckPathStaysOnThePod: spec.rollout.check.path is tenant input. Only absolute paths are
// accepted, and whatever reaches the request, including paths the validation refuses, asks the
// pod and nothing else; a pod's redirect elsewhere is not followed.
func TestCheckPathStaysOnThePod(t *testing.T) {
	var decoyHits atomic.Int64
	decoy := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { decoyHits.Add(1) }))
	defer decoy.Close()
	decoyHost := strings.TrimPrefix(decoy.URL, "http://")
	var podPaths []string
	pod := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		podPaths = append(podPaths, r.URL.RawPath+r.URL.Path)
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, decoy.URL+"/stolen", http.StatusFound)
		}
	}))
	defer pod.Close()
	podHost := strings.TrimPrefix(pod.URL, "http://")

	refused := []string{"http://" + decoyHost + "/x", "//" + decoyHost + "/x", "healthz", "/a/../x", "/./x",
		"/x?to=" + decoyHost, "/x#frag", `/\` + decoyHost, "/@" + decoyHost, strings.Repeat("/a", 200), ""}
	for _, p := range refused {
		if err := ValidCheckPath(p); err == nil {
			t.Errorf("check path %q accepted", p)
		}
	}
	for _, p := range []string{"/_healthz", "/products/shoe-1;v=2", "/a/b/", "/%2e%2e/admin"} {
		if err := ValidCheckPath(p); err != nil {
			t.Errorf("check path %q refused: %v", p, err)
		}
	}

	r := &Reconciler{checkClient: notify.NewClient()}
	for _, p := range append(refused[:len(refused)-1], "/redirect") {
		code, _, err := r.get(context.Background(), podHost, "/"+strings.TrimPrefix(p, "/"))
		if err != nil {
			t.Errorf("%q: %v", p, err)
		}
		if p == "/redirect" && code != http.StatusFound {
			t.Errorf("redirect: got %d, want the 302 itself", code)
		}
	}
	if decoyHits.Load() != 0 {
		t.Fatalf("a check path reached another server %d times (pod saw %q)", decoyHits.Load(), podPaths)
	}
	if len(podPaths) != len(refused) {
		t.Fatalf("the pod saw %d requests, want %d: %q", len(podPaths), len(refused), podPaths)
	}
}
