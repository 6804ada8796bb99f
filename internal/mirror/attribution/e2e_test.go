package attribution_test

import (
	"context"
	"fmt"
	"net"
	"sort"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/mirror/attribution"
	"github.com/siteops/siteops/internal/mirror/audit"
	"github.com/siteops/siteops/internal/mirror/gitwriter"
	"github.com/siteops/siteops/internal/mirror/store"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

var configmaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// auditPolicy logs writes to ConfigMaps with their responses (for UIDs, RVs and
// deletecollection bodies) and nothing else; dora's collection deletes are logged at the
// Metadata level, without the list of deleted objects.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
  users: ["dora"]
  verbs: ["deletecollection"]
  resources:
  - group: ""
    resources: ["configmaps"]
- level: RequestResponse
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
  resources:
  - group: ""
    resources: ["configmaps"]
- level: None
`

// auditedCluster is an API server whose audit webhook posts to a receiver in this process.
type auditedCluster struct {
	c     *testenv.Cluster
	index *store.AttributionIndex
	// redis is the server holding the facts (for its command statistics).
	redis *servers.Process
}

// resolver returns a resolver woken by the receiver's announcements, as the manager runs it.
func (a *auditedCluster) resolver(t testing.TB, cfg attribution.Config) *attribution.Resolver {
	cfg.Index, cfg.Announcements = a.index, a.index
	r := attribution.New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func startAuditedCluster(t testing.TB, route string) *auditedCluster {
	t.Helper()
	rds := testenv.Redis(t, servers.RedisOptions{})
	st, err := store.NewRedisStore(store.RedisStoreConfig{Addr: rds.Addr, KeyPrefix: "e2e"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ac := &auditedCluster{index: st.AttributionIndex(time.Minute), redis: rds}

	l := testenv.LoopbackListener(t)
	ip, _, _ := net.SplitHostPort(l.Addr().String())
	certs := testenv.NewMTLS(t, "kube-apiserver-audit", ip)
	rcv, err := audit.NewReceiver(audit.Config{
		CertDir: certs.CertDir, ClientCAFile: certs.CAFile, ClientNames: []string{"kube-apiserver-audit"}, Listener: l,
		Handler: &audit.Handler{Recorder: ac.index},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = rcv.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	aw, err := servers.WriteAuditWebhook(t.TempDir(), "https://"+l.Addr().String()+audit.PathPrefix+route, certs.MTLS, auditPolicy)
	if err != nil {
		t.Fatal(err)
	}
	ac.c = testenv.NewAPIServer(t, servers.APIServerOptions{Configure: aw.Configure})
	return ac
}

// userConfig returns a REST config for a user with its own client certificate.
func (a *auditedCluster) userConfig(t testing.TB, name string) *rest.Config {
	t.Helper()
	return a.c.UserConfig(t, name, "system:masters")
}

// serviceAccountConfig returns a REST config authenticating as a service account (bound to
// cluster-admin) with a token from the TokenRequest API.
func (a *auditedCluster) serviceAccountConfig(t testing.TB, ns, name string) *rest.Config {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := a.c.Client.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: ns, Name: name}},
	}
	if err := a.c.Client.Create(ctx, crb); err != nil {
		t.Fatal(err)
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{}}
	if err := a.c.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatalf("request a service account token: %v", err)
	}
	cfg := rest.AnonymousClientConfig(a.c.Config)
	cfg.BearerToken = tr.Status.Token
	return cfg
}

type recordingSink struct {
	mu  sync.Mutex
	ops []gitwriter.Op
}

func (s *recordingSink) Enqueue(_ context.Context, op gitwriter.Op) error {
	s.mu.Lock()
	s.ops = append(s.ops, op)
	s.mu.Unlock()
	return nil
}

// mirrorWatch feeds the watch events of ConfigMaps in ns through a resolver stream, like the
// mirror's watch streams do, and collects what reaches the writer with each resolution.
type mirrorWatch struct {
	sink    *recordingSink
	mu      sync.Mutex
	results map[string]attribution.Resolved // uid/rv
}

func startWatch(t testing.TB, ac *auditedCluster, ns string, cfg attribution.Config) *mirrorWatch {
	t.Helper()
	mw := &mirrorWatch{sink: &recordingSink{}, results: map[string]attribution.Resolved{}}
	cfg.OnResolved = func(r attribution.Resolved) {
		mw.mu.Lock()
		mw.results[string(r.UID)+"/"+r.RV] = r
		mw.mu.Unlock()
	}
	r := ac.resolver(t, cfg)
	stream := r.NewStream(mw.sink, configmaps)
	cs := kubernetes.NewForConfigOrDie(ac.c.Config)
	ctx, cancel := context.WithCancel(context.Background())
	w, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok {
				continue
			}
			cursor := gitwriter.Cursor{TargetUID: "t", GVR: configmaps, Namespace: ns, RV: cm.ResourceVersion}
			change := gitwriter.Change{Path: ns + "/" + cm.Name + ".yaml", Ref: cm.Name, Received: time.Now()}
			op := gitwriter.Op{Kind: gitwriter.OpUpsert, Change: change, Cursor: cursor}
			removal := ev.Type == watch.Deleted || cm.DeletionTimestamp != nil
			if removal {
				op.Kind = gitwriter.OpDelete
			}
			_ = stream.EnqueueEvent(ctx, op, attribution.Event{UID: cm.UID, RV: cm.ResourceVersion, ExactCapable: !removal, Namespace: ns})
		}
	}()
	t.Cleanup(func() { cancel(); w.Stop(); <-done })
	return mw
}

func (mw *mirrorWatch) result(uid, rv string) (attribution.Resolved, bool) {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	r, ok := mw.results[uid+"/"+rv]
	return r, ok
}

func (mw *mirrorWatch) handed() []gitwriter.Op {
	mw.sink.mu.Lock()
	defer mw.sink.mu.Unlock()
	return append([]gitwriter.Op(nil), mw.sink.ops...)
}

func (mw *mirrorWatch) waitHanded(t testing.TB, n int, within time.Duration) []gitwriter.Op {
	t.Helper()
	testenv.Eventually(t, within, func() error {
		if got := len(mw.handed()); got < n {
			return fmt.Errorf("%d of %d ops handed over", got, n)
		}
		return nil
	})
	return mw.handed()
}

func author(op gitwriter.Op) string {
	if op.Change.Author == nil {
		return "<committer>"
	}
	return op.Change.Author.Name
}

// TestAuditAttributionEndToEnd drives a real API server whose audit webhook posts over mTLS to
// the receiver, which stores facts in a real Redis; watch events are resolved against them.
func TestAuditAttributionEndToEnd(t *testing.T) {
	ac := startAuditedCluster(t, "prod")
	ctx := context.Background()
	ns := ac.c.Namespace(t, "attr", nil)
	const grace = 4 * time.Second
	mw := startWatch(t, ac, ns, attribution.Config{Route: "prod", Grace: grace})
	// A second mirror whose route the API server does not post to: everything is absent.
	unrouted := startWatch(t, ac, ns, attribution.Config{Route: "elsewhere", Grace: 500 * time.Millisecond})

	alice, err := client.New(ac.userConfig(t, "alice"), client.Options{Scheme: ac.c.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	bob, _ := client.New(ac.userConfig(t, "bob"), client.Options{Scheme: ac.c.Scheme})
	erin, _ := client.New(ac.userConfig(t, "erin"), client.Options{Scheme: ac.c.Scheme})
	robot, _ := client.New(ac.serviceAccountConfig(t, ns, "deployer"), client.Options{Scheme: ac.c.Scheme})

	mk := func(c client.Client, name string, labels map[string]string) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Data: map[string]string{"k": name}}
		if err := c.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		return cm
	}
	a := mk(alice, "from-alice", nil)
	b := mk(bob, "from-bob", nil)
	s := mk(robot, "from-robot", nil)
	// bob updates alice's object: the update is bob's, the create stays alice's.
	a2 := a.DeepCopy()
	a2.Data["k"] = "changed by bob"
	if err := bob.Update(ctx, a2); err != nil {
		t.Fatal(err)
	}
	// alice deletes bob's object.
	if err := alice.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	// erin deletes a collection of three.
	batch := map[string]string{"batch": "x"}
	var items []*corev1.ConfigMap
	for i := range 3 {
		items = append(items, mk(alice, fmt.Sprintf("batch-%d", i), batch))
	}
	if err := erin.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace(ns), client.MatchingLabels(batch)); err != nil {
		t.Fatal(err)
	}

	const total = 3 + 1 + 1 + 3 + 3 // creates, update, delete, batch creates, batch removals
	ops := mw.waitHanded(t, total, 30*time.Second)
	want := map[string][]string{ // path → authors of its ops in order
		ns + "/from-alice.yaml": {"alice", "bob"},
		ns + "/from-bob.yaml":   {"bob", "alice"},
		ns + "/from-robot.yaml": {"system:serviceaccount:" + ns + ":deployer"},
	}
	for _, it := range items {
		want[ns+"/"+it.Name+".yaml"] = []string{"alice", "erin"}
	}
	got := map[string][]string{}
	for _, op := range ops {
		got[op.Change.Path] = append(got[op.Change.Path], author(op))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		mw.mu.Lock()
		for k, r := range mw.results {
			t.Logf("%s: %s %s verb=%s rv=%s", k, r.Result, r.Fact.Author, r.Fact.Verb, r.Fact.ResourceVersion)
		}
		mw.mu.Unlock()
		t.Fatalf("authors per file:\n got %v\nwant %v", got, want)
	}
	check := func(uid, rv string, results ...store.AttributionResult) {
		t.Helper()
		r, ok := mw.result(uid, rv)
		if !ok {
			t.Fatalf("no resolution for %s/%s", uid, rv)
		}
		for _, want := range results {
			if r.Result == want {
				return
			}
		}
		t.Errorf("resolution of %s@%s (%s) = %s, want one of %v", uid, rv, r.Fact.Author, r.Result, results)
	}
	check(string(a.UID), a.ResourceVersion, store.AttributionExactUser)
	check(string(a.UID), a2.ResourceVersion, store.AttributionExactUser)
	check(string(s.UID), s.ResourceVersion, store.AttributionExactServiceAccount)
	// Removals: a single delete is exact or via :last; collection members are credited per item.
	mw.mu.Lock()
	var removals []attribution.Resolved
	for _, r := range mw.results {
		if r.Fact.Verb == "delete" || r.Fact.Verb == "deletecollection" {
			removals = append(removals, r)
		}
	}
	mw.mu.Unlock()
	sort.Slice(removals, func(i, j int) bool { return removals[i].Fact.Name < removals[j].Fact.Name })
	if len(removals) != 4 {
		t.Fatalf("removal resolutions = %+v, want 4", removals)
	}
	for _, r := range removals {
		switch r.Fact.Verb {
		case "delete":
			if r.Result != store.AttributionExactUser && r.Result != store.AttributionWeak {
				t.Errorf("delete resolved %s", r.Result)
			}
		case "deletecollection":
			if r.Result != store.AttributionExactDeleteCollectionItem || r.Fact.Author != "erin" {
				t.Errorf("collection removal of %s resolved %s by %s", r.Fact.Name, r.Result, r.Fact.Author)
			}
		}
	}

	// The unrouted mirror commits everything as the committer, after its grace.
	for _, op := range unrouted.waitHanded(t, total, 30*time.Second) {
		if op.Change.Author != nil {
			t.Fatalf("unrouted op %s authored by %s", op.Change.Path, op.Change.Author.Name)
		}
	}
	unrouted.mu.Lock()
	for _, r := range unrouted.results {
		if r.Result != store.AttributionAbsent || r.Waited < 500*time.Millisecond {
			t.Errorf("unrouted resolution %s after %v", r.Result, r.Waited)
		}
	}
	unrouted.mu.Unlock()
}

// BenchmarkAttribution200PerSecond: 5 users change ConfigMaps at 200 changes/s in total through a
// real API server with audit batching (batch max wait 1s); reports the share of changes attributed
// exactly to their writer and the resolution latency.
func BenchmarkAttribution200PerSecond(b *testing.B) {
	ac := startAuditedCluster(b, "prod")
	ctx := context.Background()
	ns := ac.c.Namespace(b, "bench", nil)
	const grace = attribution.DefaultGrace
	mw := startWatch(b, ac, ns, attribution.Config{Route: "prod", Grace: grace})
	users := []string{"u1", "u2", "u3", "u4", "u5"}
	clients := make([]*kubernetes.Clientset, len(users))
	for i, u := range users {
		clients[i] = kubernetes.NewForConfigOrDie(ac.userConfig(b, u))
	}
	const perUser = 8
	// Each user owns perUser ConfigMaps and updates them round-robin.
	for i, u := range users {
		for j := range perUser {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", u, j)}, Data: map[string]string{"n": "0"}}
			if _, err := clients[i].CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	const rate = 200
	const seconds = 5
	changes := 0
	var byUser sync.Map // "uid/rv" → user
	mw.waitHanded(b, len(users)*perUser, time.Minute)
	before := testenv.RedisCommands(b, ac.redis.Addr)
	start := time.Now()
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for i, u := range users {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(time.Second * time.Duration(len(users)) / rate)
				defer tick.Stop()
				for k := 0; k < rate*seconds/len(users); k++ {
					<-tick.C
					name := fmt.Sprintf("%s-%d", u, k%perUser)
					patch := fmt.Appendf(nil, `{"data":{"n":"%d-%d"}}`, n, k)
					cm, err := clients[i].CoreV1().ConfigMaps(ns).Patch(ctx, name, "application/merge-patch+json", patch, metav1.PatchOptions{})
					if err != nil {
						b.Error(err)
						return
					}
					byUser.Store(string(cm.UID)+"/"+cm.ResourceVersion, u)
					mu.Lock()
					changes++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
	}
	total := len(users)*perUser + changes
	mw.waitHanded(b, total, 2*time.Minute)
	b.StopTimer()
	elapsed := time.Since(start)
	after := testenv.RedisCommands(b, ac.redis.Addr)
	cmds := int64(0)
	perCommand := map[string]int64{}
	for name, n := range after {
		if d := n - before[name]; d > 0 {
			cmds += d
			perCommand[name] = d
		}
	}

	var exact, wrong int
	var waits []time.Duration
	mw.mu.Lock()
	byUser.Range(func(k, v any) bool {
		r, ok := mw.results[k.(string)]
		if !ok {
			return true
		}
		waits = append(waits, r.Waited)
		if r.Result == store.AttributionExactUser {
			if r.Fact.Author == v.(string) {
				exact++
			} else {
				wrong++
			}
		}
		return true
	})
	mw.mu.Unlock()
	sort.Slice(waits, func(i, j int) bool { return waits[i] < waits[j] })
	pct := func(p float64) time.Duration {
		if len(waits) == 0 {
			return 0
		}
		return waits[min(len(waits)-1, int(p*float64(len(waits))))]
	}
	if wrong > 0 {
		b.Errorf("%d changes attributed to the wrong user", wrong)
	}
	b.ReportMetric(100*float64(exact)/float64(changes), "%exact")
	b.ReportMetric(float64(pct(0.5).Milliseconds()), "p50-ms")
	b.ReportMetric(float64(pct(0.99).Milliseconds()), "p99-ms")
	b.ReportMetric(float64(changes), "changes")
	b.ReportMetric(float64(changes)/elapsed.Seconds(), "changes/s")
	b.ReportMetric(float64(cmds)/float64(changes), "redis-cmds/change")
	b.Logf("%d changes by %d users at %d/s: %d exact (%.2f%%), resolution p50 %v p99 %v max %v (grace %v); %.0f changes/s; redis commands %v",
		changes, len(users), rate, exact, 100*float64(exact)/float64(changes), pct(0.5), pct(0.99), pct(1), grace, float64(changes)/elapsed.Seconds(), perCommand)
}
