package notify_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/siteops/siteops/internal/decofile/notify"
)

// TestLoadedReport: a pod that says it could not load the content fails at once (422, or a 200
// whose report says loaded:false); a bare 200, as the published Deno runtime answers, counts as
// loaded.
func TestLoadedReport(t *testing.T) {
	cases := map[string]struct {
		code int
		body string
		ok   bool
	}{
		"bare 200":           {200, "", true},
		"plain text 200":     {200, "ok", true},
		"loaded":             {200, `{"loaded":true,"applied":true}`, true},
		"other report first": {200, `{"applied":true,"loaded":false}`, true},
		"not loaded":         {200, `{"loaded":false,"message":"` + strings.Repeat("x", 200) + `"}`, false},
		"422":                {422, `{"loaded":false,"message":"block /home has a __resolveType that is not a module name"}`, false},
	}
	for name, c := range cases {
		var calls atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			w.WriteHeader(c.code)
			_, _ = io.WriteString(w, c.body)
		}))
		u, _ := url.Parse(srv.URL)
		host, port, _ := net.SplitHostPort(u.Host)
		p, _ := strconv.Atoi(port)
		res := notify.New(notify.Config{Attempts: 3, Backoff: time.Millisecond}).Run(context.Background(), notify.Rollout{ID: "t", Protocol: notify.ProtocolPush,
			Body: notify.PushBody(1, []byte(`{}`)), Token: "x", Pods: []notify.Pod{{Name: "p", IP: host, Port: int32(p)}}})
		srv.Close()
		if res.Succeeded() != c.ok {
			t.Errorf("%s: succeeded %v, want %v (%+v)", name, res.Succeeded(), c.ok, res.Pods)
		}
		if !c.ok && calls.Load() != 1 {
			t.Errorf("%s: asked %d times; a pod that cannot load the content is not asked again", name, calls.Load())
		}
	}
}
