package ui_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	decofilecontroller "github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/testenv"
	"github.com/siteops/siteops/internal/ui/access"
	"github.com/siteops/siteops/internal/ui/live"
	"github.com/siteops/siteops/internal/ui/web"
)

// as authenticates every request as one person, for benchmarks that call the server directly;
// a benchUser header renames the person (keeping the groups), for pages of many people.
type as access.Person

const benchUser = "X-Bench-User"

func (a as) Authenticate(r *http.Request) (access.Person, error) {
	p := access.Person(a)
	if u := r.Header.Get(benchUser); u != "" {
		p.User = u
	}
	return p, nil
}

// benchSites creates n Decofiles spread over namespaces of perNS each, and returns the
// namespaces.
func benchSites(b *testing.B, c *testenv.Cluster, n, perNS int) []string {
	b.Helper()
	var namespaces []string
	for i := 0; i < n/perNS; i++ {
		namespaces = append(namespaces, c.Namespace(b, "ui-bench", nil))
	}
	work := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range work {
				d := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Namespace: namespaces[i/perNS], Name: fmt.Sprintf("site-%d", i)},
					Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: inline(map[string]string{"home": `{"title":"x"}`})}}
				if err := c.Client.Create(context.Background(), d); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	return namespaces
}

// benchServer serves the UI from a cache of c, as the manager does, for person.
func benchServer(b *testing.B, c *testenv.Cluster, person access.Person, hub bool) (*web.Server, *live.Hub) {
	b.Helper()
	co := cache.Options{Scheme: c.Scheme, DefaultTransform: cache.TransformStripManagedFields()}
	decofilecontroller.CacheOptions(&co)
	ca, err := cache.New(c.Config, co)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	go func() { _ = ca.Start(ctx) }()
	if !ca.WaitForCacheSync(ctx) {
		b.Fatal("the cache did not start")
	}
	authz := access.NewAuthorizer(access.SubjectReviewer{Client: c.Client}, 0)
	backend := web.Backend{Objects: ca, Access: authz, As: func(access.Person) (client.Client, error) { return c.Client, nil }}
	var h *live.Hub
	if hub {
		h = live.NewHub(authz, web.Checks())
		go func() { _ = h.Run(ctx) }()
		backend.Hub = h
	}
	srv, err := web.New(backend, web.Options{Authenticator: as(person), Rate: 1e6, Burst: 1e6})
	if err != nil {
		b.Fatal(err)
	}
	// Warm the cache's informers (the first request starts them) and the access answers.
	warm := httptest.NewRecorder()
	srv.ServeHTTP(warm, httptest.NewRequest(http.MethodGet, "/", nil))
	if warm.Code != http.StatusOK {
		b.Fatalf("overview: HTTP %d: %s", warm.Code, warm.Body.String())
	}
	return srv, h
}

// BenchmarkOverview5000 measures the server time of the overview page with 5 000 Decofiles in
// 100 namespaces: for an admin, who sees them all, and for a tenant, who sees its namespace's 50.
func BenchmarkOverview5000(b *testing.B) {
	c := testenv.APIServer(b)
	namespaces := benchSites(b, c, 5000, 50)
	tenant := c.TenantIn(b, namespaces[0])
	for _, p := range []struct {
		name   string
		person access.Person
		sites  int
	}{
		{"admin", access.Person{User: "platform-admin", Groups: []string{"system:masters"}}, 5000},
		{"tenant", access.Person{User: tenant.Name, Groups: []string{"system:authenticated"}}, 50},
	} {
		b.Run(p.name, func(b *testing.B) {
			srv, _ := benchServer(b, c, p.person, false)
			testenv.Eventually(b, time.Minute, func() error {
				w := httptest.NewRecorder()
				srv.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
				if got := strings.Count(w.Body.String(), "decofile/"); got < min(p.sites, 200) {
					return fmt.Errorf("%d sites on the page, want %d", got, min(p.sites, 200))
				}
				return nil
			})
			b.ResetTimer()
			for b.Loop() {
				w := httptest.NewRecorder()
				srv.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
				if w.Code != http.StatusOK {
					b.Fatalf("HTTP %d", w.Code)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/page")
		})
	}
}

// BenchmarkLivePages50 measures the manager memory 50 open live pages cost: their streams, their
// subscriptions, and the fan-out of a change to all of them.
func BenchmarkLivePages50(b *testing.B) {
	c := testenv.APIServer(b)
	admin := access.Person{User: "platform-admin", Groups: []string{"system:masters"}}
	for b.Loop() {
		srv, hub := benchServer(b, c, admin, true)
		ts := httptest.NewServer(srv)
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		ctx, cancel := context.WithCancel(context.Background())
		var bodies []*bufio.Reader
		var streams []io.Closer
		for i := range 50 {
			// One person may keep 20 pages open: these are 50 people's.
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+"/live", nil)
			req.Header.Set(benchUser, fmt.Sprintf("admin-%d", i))
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				b.Fatalf("open a live page: %v", err)
			}
			if res.StatusCode != http.StatusOK {
				res.Body.Close()
				b.Fatalf("open a live page: HTTP %d", res.StatusCode)
			}
			streams = append(streams, res.Body)
			bodies = append(bodies, bufio.NewReader(res.Body))
		}
		if hub.Subscribers() != 50 {
			b.Fatalf("%d subscribers, want 50", hub.Subscribers())
		}
		hub.Publish(live.Change{Kind: "Decofile", Namespace: "default", Name: "x"})
		for _, r := range bodies {
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					b.Fatal(err)
				}
				if strings.HasPrefix(line, "event: change") {
					break
				}
			}
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		// Heap and goroutine stacks; the client side of the streams is counted too, so this is an
		// upper bound of the manager's share.
		used := func(m runtime.MemStats) int64 { return int64(m.HeapInuse + m.StackInuse) }
		b.ReportMetric(float64(used(after)-used(before))/(1<<20), "MiB/50-pages")
		for _, s := range streams {
			s.Close()
		}
		cancel()
		ts.CloseClientConnections()
		ts.Close()
	}
}
