package feed_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/siteops/siteops/internal/mirror/feed"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m, servers.APIServerOptions{}) }

var configmaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// setup returns Feeds on the shared API server.
func setup(t *testing.T) (*testenv.Cluster, *feed.Feeds) {
	t.Helper()
	c := testenv.APIServer(t)
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	return c, feed.New(dyn)
}

// put creates or updates a ConfigMap and returns its new resourceVersion.
func put(t *testing.T, c *testenv.Cluster, ns, name, value string) string {
	t.Helper()
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"v": value}}
	err := c.Client.Create(ctx, cm)
	if apierrors.IsAlreadyExists(err) {
		var cur corev1.ConfigMap
		if err = c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &cur); err == nil {
			cur.Data = cm.Data
			err = c.Client.Update(ctx, &cur)
			cm = &cur
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return cm.ResourceVersion
}

// seen is one object event a subscriber received: namespace/name=value at a resourceVersion.
type seen struct{ key, rv string }

// next reads w until an object event arrives (bookmarks skipped) or the wait ends.
func next(t *testing.T, w watch.Interface, within time.Duration) (seen, bool) {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return seen{}, false
			}
			if ev.Type == watch.Bookmark {
				continue
			}
			if ev.Type == watch.Error {
				t.Fatalf("error event: %v", apierrors.FromObject(ev.Object))
			}
			m, err := apimeta.Accessor(ev.Object)
			if err != nil {
				t.Fatal(err)
			}
			u := ev.Object.(interface{ UnstructuredContent() map[string]any }).UnstructuredContent()
			data, _ := u["data"].(map[string]any)
			return seen{key: fmt.Sprintf("%s/%s=%v", m.GetNamespace(), m.GetName(), data["v"]), rv: m.GetResourceVersion()}, true
		case <-deadline:
			return seen{}, false
		}
	}
}

// expect reads the next object events of w and checks they are want, in order.
func expect(t *testing.T, w watch.Interface, want ...string) string {
	t.Helper()
	last := ""
	for _, k := range want {
		got, ok := next(t, w, 15*time.Second)
		if !ok {
			t.Fatalf("waited for %s: nothing came", k)
		}
		if got.key != k {
			t.Fatalf("got %s, want %s", got.key, k)
		}
		last = got.rv
	}
	return last
}

// quiet checks that no object event arrives on w for a while.
func quiet(t *testing.T, w watch.Interface) {
	t.Helper()
	if got, ok := next(t, w, 500*time.Millisecond); ok {
		t.Fatalf("unexpected event %s", got.key)
	}
}

func TestStreamsOfManyNamespacesShareOneWatch(t *testing.T) {
	c, fs := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before := c.Watches(t, "configmaps")
	const n = 12
	nss := make([]string, n)
	ws := make([]watch.Interface, n)
	for i := range nss {
		nss[i] = c.Namespace(t, "feed", nil)
		rv := put(t, c, nss[i], "seed", "0")
		w, err := fs.Watch(ctx, configmaps, nss[i], rv)
		if err != nil {
			t.Fatal(err)
		}
		ws[i] = w
	}
	for i, ns := range nss {
		put(t, c, ns, "a", fmt.Sprint(i))
		put(t, c, ns, "a", fmt.Sprint(i+100))
	}
	for i, ns := range nss {
		// Its own namespace's changes only, in order, each once.
		expect(t, ws[i], fmt.Sprintf("%s/a=%d", ns, i), fmt.Sprintf("%s/a=%d", ns, i+100))
		quiet(t, ws[i])
	}
	if got := fs.Open(); len(got) != 1 || got[configmaps] != n {
		t.Fatalf("shared watches %v, want one of configmaps with %d subscribers", got, n)
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		if got := c.Watches(t, "configmaps") - before; got != 1 {
			return fmt.Errorf("the API server holds %d more watches of configmaps, want 1", got)
		}
		return nil
	})
	for _, w := range ws {
		w.Stop()
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if got := fs.Open(); len(got) != 0 {
			return fmt.Errorf("shared watches still open after every subscriber stopped: %v", got)
		}
		if got := c.Watches(t, "configmaps") - before; got != 0 {
			return fmt.Errorf("the API server still holds %d more watches of configmaps", got)
		}
		return nil
	})
}

func TestSubscriberBehindTheSharedWatchMissesNothing(t *testing.T) {
	c, fs := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	early, other := c.Namespace(t, "feed", nil), c.Namespace(t, "feed", nil)
	from := put(t, c, early, "seed", "0")
	put(t, c, early, "b", "1")
	put(t, c, early, "b", "2")
	// Another namespace's subscriber starts the shared watch after those changes.
	wo, err := fs.Watch(ctx, configmaps, other, put(t, c, other, "seed", "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer wo.Stop()
	put(t, c, other, "o", "1")
	expect(t, wo, other+"/o=1")
	put(t, c, early, "b", "3")
	// A subscriber from the earlier position gets the changes from before the shared watch's
	// position and after it, each once and in order.
	we, err := fs.Watch(ctx, configmaps, early, from)
	if err != nil {
		t.Fatal(err)
	}
	defer we.Stop()
	put(t, c, early, "b", "4")
	expect(t, we, early+"/b=1", early+"/b=2", early+"/b=3", early+"/b=4")
	quiet(t, we)
	put(t, c, early, "b", "5")
	expect(t, we, early+"/b=5")
}

func TestSlowSubscriberIsLetGoAndResumesWithoutLoss(t *testing.T) {
	c, fs := setup(t)
	fs.QueueLimit = 3
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slowNS, fastNS := c.Namespace(t, "feed", nil), c.Namespace(t, "feed", nil)
	slow, err := fs.Watch(ctx, configmaps, slowNS, put(t, c, slowNS, "seed", "0"))
	if err != nil {
		t.Fatal(err)
	}
	fast, err := fs.Watch(ctx, configmaps, fastNS, put(t, c, fastNS, "seed", "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Stop()
	// The slow subscriber reads nothing while ten changes arrive for it; the other one is not
	// held up by it.
	for i := 1; i <= 10; i++ {
		put(t, c, slowNS, "s", fmt.Sprint(i))
		put(t, c, fastNS, "f", fmt.Sprint(i))
		expect(t, fast, fmt.Sprintf("%s/f=%d", fastNS, i))
	}
	// What the slow one still holds comes, then its watch ends; a new watch from the last
	// resourceVersion it saw brings the rest: every change once, in order.
	key := func(i int) string { return fmt.Sprintf("%s/s=%d", slowNS, i) }
	var got []string
	last := ""
	for {
		s, ok := next(t, slow, 10*time.Second)
		if !ok {
			break
		}
		got, last = append(got, s.key), s.rv
	}
	if len(got) >= 10 {
		t.Fatalf("the slow subscriber was never let go: it got all of %v", got)
	}
	for i, k := range got {
		if k != key(i+1) {
			t.Fatalf("before it was let go the slow subscriber got %v", got)
		}
	}
	// Resumed on Feeds with the default bound: a limit of 3 would let the resumed watch go too,
	// as the changes since its position come all at once.
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	resumed, err := feed.New(dyn).Watch(ctx, configmaps, slowNS, last)
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Stop()
	for i := len(got) + 1; i <= 10; i++ {
		expect(t, resumed, key(i))
	}
	quiet(t, resumed)
}

func TestReaderOfSomeNamespacesWatchesEachDirectly(t *testing.T) {
	c, _ := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// An identity that may read ConfigMaps in its own namespace only.
	tenant := c.Tenant(t, "feed", nil)
	dyn, err := dynamic.NewForConfig(tenant.Config)
	if err != nil {
		t.Fatal(err)
	}
	fs := feed.New(dyn)
	w, err := fs.Watch(ctx, configmaps, tenant.Namespace, put(t, c, tenant.Namespace, "seed", "0"))
	if err != nil {
		t.Fatalf("watch where the cluster-wide list is forbidden: %v", err)
	}
	defer w.Stop()
	put(t, c, tenant.Namespace, "t", "1")
	expect(t, w, tenant.Namespace+"/t=1")
	if got := fs.Open(); len(got) != 0 {
		t.Fatalf("shared watches %v, want none for an identity that may not watch every namespace", got)
	}
}

func TestSubscriberFromAnOlderPositionOpensNoWatchOfItsOwn(t *testing.T) {
	c, fs := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	quietNS, busyNS := c.Namespace(t, "feed", nil), c.Namespace(t, "feed", nil)
	from := put(t, c, quietNS, "q", "1")
	busy, err := fs.Watch(ctx, configmaps, busyNS, put(t, c, busyNS, "seed", "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Stop()
	put(t, c, quietNS, "q", "2")
	put(t, c, busyNS, "b", "1")
	expect(t, busy, busyNS+"/b=1")
	before := c.Watches(t, "configmaps")
	// Behind the shared watch: the shared watch starts again from its position, and the
	// subscriber already following skips what it was handed before.
	w, err := fs.Watch(ctx, configmaps, quietNS, from)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	expect(t, w, quietNS+"/q=2")
	put(t, c, busyNS, "b", "2")
	expect(t, busy, busyNS+"/b=2")
	quiet(t, busy)
	if got := c.Watches(t, "configmaps") - before; got != 0 {
		t.Fatalf("the API server holds %d more watches of configmaps, want none", got)
	}
	put(t, c, quietNS, "q", "3")
	expect(t, w, quietNS+"/q=3")
	quiet(t, w)
}

// A compacted history is needed: a server without watch cache that compacts etcd every second
// answers 410 Gone to a watch from an old resourceVersion.
func TestPositionTheAPIServerNoLongerHasEndsOnlyItsSubscriber(t *testing.T) {
	c := testenv.NewAPIServer(t, servers.APIServerOptions{Configure: func(env *envtest.Environment) {
		args := env.ControlPlane.GetAPIServer().Configure()
		args.Set("watch-cache", "false")
		args.Set("etcd-compaction-interval", "1s")
	}})
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	fs := feed.New(dyn)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	goneNS, liveNS := c.Namespace(t, "feed", nil), c.Namespace(t, "feed", nil)
	old := put(t, c, goneNS, "g", "0")
	for i := range 5 {
		put(t, c, goneNS, "g", fmt.Sprint(i+1))
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		w, err := dyn.Resource(configmaps).Namespace(goneNS).Watch(ctx, metav1.ListOptions{ResourceVersion: old})
		if err != nil {
			return nil // 410 on the request itself
		}
		defer w.Stop()
		select {
		case ev := <-w.ResultChan():
			if ev.Type == watch.Error {
				return nil
			}
			return fmt.Errorf("a watch from %s still delivers %s", old, ev.Type)
		case <-time.After(time.Second):
			return fmt.Errorf("no event")
		}
	})
	live, err := fs.Watch(ctx, configmaps, liveNS, put(t, c, liveNS, "seed", "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Stop()
	put(t, c, liveNS, "l", "1")
	expect(t, live, liveNS+"/l=1")

	gone, err := fs.Watch(ctx, configmaps, goneNS, old)
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Stop()
	select {
	case ev, ok := <-gone.ResultChan():
		if !ok || ev.Type != watch.Error {
			t.Fatalf("got %v (open %v), want a 410 error event", ev.Type, ok)
		}
		if err := apierrors.FromObject(ev.Object); !apierrors.IsGone(err) && !apierrors.IsResourceExpired(err) {
			t.Fatalf("got %v, want 410 Gone", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no answer for a position the API server no longer has")
	}
	// The other subscriber goes on: nothing twice, nothing lost.
	put(t, c, liveNS, "l", "2")
	expect(t, live, liveNS+"/l=2")
	quiet(t, live)
}

func TestSubscriberOfEveryNamespaceGetsThemAll(t *testing.T) {
	c, fs := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	one, two := c.Namespace(t, "feed", nil), c.Namespace(t, "feed", nil)
	mine, err := fs.Watch(ctx, configmaps, one, put(t, c, one, "seed", "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Stop()
	all, err := fs.Watch(ctx, configmaps, "", put(t, c, two, "seed", "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer all.Stop()
	put(t, c, one, "a", "1")
	put(t, c, two, "b", "1")
	expect(t, all, one+"/a=1", two+"/b=1")
	expect(t, mine, one+"/a=1")
	quiet(t, mine)
}
