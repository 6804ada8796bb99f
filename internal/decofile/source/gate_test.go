package source

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/siteops/siteops/internal/decofile/source/ghtest"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// fakeClock is a clock for a Gate's logic that moves only when advance is called.
func fakeClock() (clock func() time.Time, advance func(time.Duration)) {
	now := time.Unix(1_700_000_000, 0)
	var mu sync.Mutex
	clock = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance = func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	return clock, advance
}

// A full remote is waited for while its retrievals are young, and refused at once, with a
// transient error, once every slot has been held for SlowAfter; other remotes are unaffected
// and a released slot is taken again.
func TestGateRefusesOnlyASlowRemote(t *testing.T) {
	clock, advance := fakeClock()
	g := &Gate{PerRemote: 2, SlowAfter: time.Hour, now: clock}
	ctx := context.Background()
	r1, err := g.Acquire(ctx, "slow", "slow remote")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Acquire(ctx, "slow", "slow remote"); err != nil {
		t.Fatal(err)
	}
	// Young: a third waits, and takes the slot released meanwhile.
	got := make(chan error, 1)
	go func() {
		release, err := g.Acquire(ctx, "slow", "slow remote")
		if err == nil {
			release()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("a third retrieval did not wait for a slot of a remote answering in time: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	r1()
	r1() // a second release changes nothing
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if n := g.InFlight("slow"); n != 1 {
		t.Fatalf("%d in flight, want 1", n)
	}
	r2, err := g.Acquire(ctx, "slow", "slow remote")
	if err != nil {
		t.Fatal(err)
	}
	// A retrieval that took SlowAfter marks the remote slow: with every slot taken again by a
	// young retrieval, a third is refused at once; one that ends in time clears the mark.
	advance(time.Hour)
	r2()
	r3, err := g.Acquire(ctx, "slow", "slow remote")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Acquire(ctx, "slow", "slow remote"); !errors.Is(err, ErrRemoteBusy) {
		t.Fatalf("a remote whose last retrieval was slow: %v, want ErrRemoteBusy", err)
	}
	r3()
	if _, err := g.Acquire(ctx, "slow", "slow remote"); err != nil {
		t.Fatal(err)
	}
	// Every slot held past SlowAfter: refused at once.
	advance(time.Hour)
	start := time.Now()
	_, err = g.Acquire(ctx, "slow", "slow remote")
	if !errors.Is(err, ErrRemoteBusy) || !AsError(err).Transient || AsError(err).Reason != ReasonUnavailable || !strings.Contains(err.Error(), "slow remote is slow to answer: 2 retrievals") {
		t.Fatalf("err %v, want a transient ErrRemoteBusy naming the remote", err)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Fatalf("refused after %s, want at once", waited)
	}
	if release, err := g.Acquire(ctx, "healthy", "healthy remote"); err != nil {
		t.Fatalf("another remote: %v", err)
	} else {
		release()
	}
	// A waiting retrieval ends with its context.
	cctx, cancel := context.WithCancel(ctx)
	advance(-time.Hour)
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	if _, err := g.Acquire(cctx, "slow", "slow remote"); err == nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want the context's", err)
	}
}

// gateProbe gives a test of g's logic take (acquire a slot, or fail the test) and busy (the
// acquisition is refused at once with ErrRemoteBusy saying why).
func gateProbe(t *testing.T, g *Gate) (take func(ctx context.Context, remote string) func(), busy func(ctx context.Context, remote, why string)) {
	take = func(ctx context.Context, remote string) func() {
		t.Helper()
		release, err := g.Acquire(ctx, remote, "the remote")
		if err != nil {
			t.Fatalf("%s: %v", remote, err)
		}
		return release
	}
	busy = func(ctx context.Context, remote, why string) {
		t.Helper()
		start := time.Now()
		_, err := g.Acquire(ctx, remote, "the remote")
		if !errors.Is(err, ErrRemoteBusy) || !strings.Contains(err.Error(), why) {
			t.Fatalf("%s: %v, want ErrRemoteBusy saying %q", remote, err, why)
		}
		if waited := time.Since(start); waited > time.Second {
			t.Fatalf("%s: refused after %s, want at once", remote, waited)
		}
	}
	return take, busy
}

// Retrievals for a tenant hold one slot of a remote at a time and two in all; a tenant whose
// retrieval from a remote was slow may then hold only the slot slow retrievals share, so the
// remote always has one for the tenants it answers in time.
func TestGateKeepsASlotForOtherTenants(t *testing.T) {
	clock, advance := fakeClock()
	g := &Gate{PerRemote: 2, SlowAfter: time.Minute, HangAfter: time.Hour, now: clock}
	ctx := context.Background()
	a, b, c := WithTenant(ctx, "tenant-a"), WithTenant(ctx, "tenant-b"), WithTenant(ctx, "tenant-c")
	take, busy := gateProbe(t, g)

	// Tenant a's first retrieval from the shared host turns slow: its next one from that host
	// is refused, tenant b still gets the other slot.
	a1 := take(a, "shared")
	advance(time.Minute)
	busy(a, "shared", "1 retrievals of this namespace from it are in flight")
	take(b, "shared")()
	// Two remotes at once at most for a tenant, whatever the remotes.
	a2 := take(a, "elsewhere")
	advance(time.Minute)
	busy(a, "third", "this namespace has 2 retrievals in flight, from any remote")
	a2()
	c1 := take(c, "shared")
	advance(time.Minute)
	a1() // each took a minute or more: a and c are slow on the shared host
	c1()

	// Slow tenants share one slot: a takes it, c (slow too) is refused, b is served.
	slowA := take(a, "shared")
	busy(c, "shared", "slow retrievals hold the slots they may use")
	b1 := take(b, "shared")
	// The host is full now: a slow tenant does not wait for a slot.
	busy(c, "shared", "slow retrievals hold the slots they may use")
	b1()
	slowA()
	// a answered in time: no longer slow, and c's mark passes after a minute.
	take(a, "shared")()
	advance(2 * time.Minute)
	take(c, "shared")()
	if n := g.InFlight("shared"); n != 0 {
		t.Fatalf("%d in flight after every release", n)
	}
}

// Tenants whose retrievals hung (took HangAfter, as a timeout does) share one slot on all
// remotes together, fresh remotes included, and never wait for it; a tenant whose retrievals
// were only slow is not held to it, nor is one that never hung; the mark passes after ten
// minutes.
func TestGateBoundsHangingTenantsTogether(t *testing.T) {
	clock, advance := fakeClock()
	g := &Gate{PerRemote: 2, SlowAfter: time.Second, HangAfter: time.Minute, now: clock}
	ctx := context.Background()
	a, b, c := WithTenant(ctx, "tenant-a"), WithTenant(ctx, "tenant-b"), WithTenant(ctx, "tenant-c")
	take, busy := gateProbe(t, g)
	const hanging = "the slot such namespaces share is taken"

	// Two namespaces hold four retrievals from their own hosts until they time out.
	held := []func(){take(a, "a-1"), take(a, "a-2"), take(b, "b-1"), take(b, "b-2")}
	advance(time.Minute)
	for _, release := range held {
		release()
	}
	// From now on they hold one slot together, whatever host they name.
	hung := take(a, "a-3")
	busy(a, "a-4", hanging)
	busy(b, "b-3", hanging)
	busy(b, "shared", hanging)
	// Others are served meanwhile.
	c1, c2 := take(c, "shared"), take(c, "c-1")
	c1()
	c2()
	hung()
	take(b, "b-3")()

	// Slow, not hanging: held to nothing more than before.
	s1, s2 := take(c, "c-1"), take(c, "c-2")
	advance(5 * time.Second)
	s1()
	s2()
	x, y := take(c, "c-3"), take(c, "c-4")
	x()
	y()

	// Ten minutes on, a is no longer held to the shared slot.
	advance(10 * time.Minute)
	a1, a2 := take(a, "a-5"), take(a, "a-6")
	a1()
	a2()
}

// Content fetched with one credential is never handed to a Decofile fetching with another or
// none: a private repository's blocks, downloaded for a Decofile with the right credentials, are
// not what an unauthenticated fetch of the same commit gets, while a second fetch with the same
// credentials is served without a download.
func TestSharedFetchKeepsCredentialsApart(t *testing.T) {
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{Username: "bot", Password: "pw"})
	repoURL, err := remote.CreateRepo("private", "main")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	testenv.Git(t, work, "init", "-q", "-b", "main")
	sha := testenv.CommitFiles(t, work, "one", map[string]string{"blocks/secret.json": `{"v":1}`})
	testenv.Git(t, work, "push", "-q", strings.Replace(repoURL, "http://", "http://bot:pw@", 1), "main")

	g := &Git{Egress: local}
	ctx := context.Background()
	right := &GitAuth{Username: "bot", Password: "pw"}
	shared := testutil.ToFloat64(fetchesTotal.WithLabelValues("git", fetchShared))
	for range 2 {
		b, err := g.Fetch(ctx, repoURL, "main", sha, "blocks", right)
		if err != nil || string(b["secret"]) != `{"v":1}` {
			t.Fatalf("fetch with the credentials: %v %v", b, err)
		}
	}
	if n := g.share.downloads(); n != 1 {
		t.Fatalf("%d downloads for two fetches of one commit, want 1", n)
	}
	if n := testutil.ToFloat64(fetchesTotal.WithLabelValues("git", fetchShared)) - shared; n != 1 {
		t.Fatalf("siteops_decofile_source_fetches_total{result=shared} grew by %v, want 1", n)
	}
	for _, auth := range []*GitAuth{nil, {Username: "bot", Password: "guess"}, {BearerToken: "pw"}} {
		b, err := g.Fetch(ctx, repoURL, "main", sha, "blocks", auth)
		if err == nil || b != nil {
			t.Fatalf("fetch with %+v got %v: content of another credential", auth, b)
		}
		wantReason(t, err, ReasonUnauthorized)
	}

	gh := ghtest.New(t)
	gh.Private("org", "private", "s3cret")
	ghSHA := gh.Push("org", "private", "main", map[string]string{"b/a.json": `{"v":1}`})
	hub := &GitHub{APIURL: gh.APIURL, ArchiveURL: gh.ArchiveURL, Egress: local}
	for range 2 {
		if _, err := hub.Fetch(ctx, "org", "private", ghSHA, "b", "s3cret"); err != nil {
			t.Fatal(err)
		}
	}
	if n := gh.Count(ghtest.KindArchive); n != 1 {
		t.Fatalf("%d archive downloads for two fetches of one commit, want 1", n)
	}
	if b, err := hub.Fetch(ctx, "org", "private", ghSHA, "b", ""); err == nil {
		t.Fatalf("fetch without the token got %v", b)
	}
}

// Fetches of one commit that arrive together share one download; a remote that hangs holds at
// most PerRemote of them, and the rest are refused once the slots have been held for SlowAfter,
// while a fetch from another host goes through.
func TestGitGateHoldsAHangingHost(t *testing.T) {
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	repoURL, err := remote.CreateRepo("site", "main")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	testenv.Git(t, work, "init", "-q", "-b", "main")
	sha := testenv.CommitFiles(t, work, "one", map[string]string{"blocks/a.json": `{"v":1}`})
	testenv.Git(t, work, "push", "-q", repoURL, "main")

	// The hanging host: a proxy that holds every request until released.
	target, _ := url.Parse(remote.BaseURL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	hold := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hold:
		case <-r.Context().Done():
		}
		proxy.ServeHTTP(w, r)
	}))
	defer hang.Close()
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	defer release()
	slowURL := hang.URL + "/site.git"

	g := &Git{Egress: local, Gate: &Gate{PerRemote: 2, SlowAfter: 200 * time.Millisecond}}
	ctx := context.Background()
	results := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := g.Fetch(ctx, slowURL, "main", sha, "blocks", nil)
			results <- err
		}()
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if n := g.gate().InFlight(gitRemoteKey(slowURL)); n != 2 {
			return errors.New("the two fetches do not hold their slots yet")
		}
		return nil
	})
	busy := testutil.ToFloat64(busyTotal.WithLabelValues("git"))
	_, err = g.Resolve(ctx, slowURL, "main", nil)
	if !errors.Is(err, ErrRemoteBusy) {
		t.Fatalf("a third retrieval from the hanging host: %v, want ErrRemoteBusy", err)
	}
	if n := testutil.ToFloat64(busyTotal.WithLabelValues("git")) - busy; n != 1 {
		t.Fatalf("siteops_decofile_source_remote_busy_total grew by %v, want 1", n)
	}
	if b, err := g.Fetch(ctx, repoURL, "main", sha, "blocks", nil); err != nil || string(b["a"]) != `{"v":1}` {
		t.Fatalf("another host: %v %v", b, err)
	}
	release()
	for range 2 {
		if err := <-results; err != nil {
			t.Fatalf("once the host answers: %v", err)
		}
	}
	// One download through the hanging host for both (they joined), one for the other host.
	if n := g.share.downloads(); n != 2 {
		t.Fatalf("%d downloads, want 2: the two fetches of one commit through one host share one", n)
	}
}
