package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
	"github.com/siteops/siteops/test/internal/nodeenv"
)

// soak is the run's state: the node environment, the load's objects, and the report.
type soak struct {
	*nodeenv.Env
	start   time.Time
	tenants []*tenant
	mirror  *mirrorLoad
	// windowed is the mirrored namespace whose GitTarget holds changes until a CommitRequest.
	windowed *mirrorLoad
	// valkeyNodes are the tenant part's Valkey master and replica, by address: a node that is
	// restarted keeps its place.
	valkeyNodes []*servers.Process
	// restarted are the servers the run started again, stopped when the test ends after the
	// chart's cleanup: the manager's finalizers on the tenant namespaces need Valkey.
	restarted []*servers.Process
	dataDir   string // holds the restarted servers' folders

	rngMu sync.Mutex
	rng   *rand.Rand
}

// intN draws from the run's seeded random source.
func (s *soak) intN(n int) int {
	s.rngMu.Lock()
	defer s.rngMu.Unlock()
	return s.rng.IntN(n)
}

// TestSoak runs mixed tenant load on the chart, installed on a real node with two manager
// replicas, while faults are injected on a seeded schedule, and checks the invariants while it
// runs and at its end. The report is logged as a table and written as report.json.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the chart on a real node under load and faults")
	}
	testenv.RequireNode(t)
	testenv.ImageArchive(t, "siteops-manager")
	testenv.ImageArchive(t, "siteops-site")
	plan, err := Plan(*flagSeed, *flagDuration, *flagGap)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seed %d: %d faults over %s (replay with -soak.seed=%d -soak.duration=%s -soak.fault-gap=%s)",
		*flagSeed, len(plan), *flagDuration, *flagSeed, *flagDuration, *flagGap)
	c := testenv.APIServer(t)
	s := &soak{Env: nodeenv.New(t, c, nodeenv.Options{ValkeySentinels: true, S3: true}), rng: rand.New(rand.NewPCG(*flagSeed, 1))}
	s.valkeyNodes = append([]*servers.Process{s.ValkeySet.Master}, s.ValkeySet.Replicas...)
	// Registered before the chart is installed, so it runs after the chart's cleanup.
	s.dataDir = t.TempDir()
	// The API server's audit log holds the whole run's writes: it goes once the run ends.
	t.Cleanup(func() { _ = os.Remove(nodeenv.AuditLog()) })
	t.Cleanup(func() {
		for _, p := range s.restarted {
			_ = p.Stop()
		}
	})
	values := s.ChartValues()
	values["flags"].(map[string]any)["pprof-bind-address"] = fmt.Sprintf(":%d", pprofPort)
	s.InstallChart(t, values)
	s.setupTenants(t, *flagTenants)
	s.setupMirror(t)

	report := &Report{Seed: *flagSeed, Duration: *flagDuration, Tenants: len(s.tenants)}
	ctx, stopLoad := context.WithCancel(context.Background())
	var load sync.WaitGroup
	s.start = time.Now()
	load.Go(func() { s.pushLoop(ctx) })
	for _, user := range mirrorUsers {
		load.Go(func() { s.editLoop(ctx, s.mirror, user) })
	}
	load.Go(func() { s.editLoop(ctx, s.windowed, windowUser) })
	commits := s.requestCommits(ctx, &load)
	rollbacks := s.watchRollbacks(ctx, &load)
	crosstalk := s.watchCrosstalk(ctx, &load)
	// The reference for memory and goroutines: minute 10 of an hour (the same share of a
	// shorter run), or as soon after as a leader has settled.
	var reference ManagerSample
	var referenceOK bool
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		time.Sleep(*flagDuration / 6)
		reference, referenceOK = s.sampleLeader(t, *flagDuration/6)
	}()
	for _, ev := range plan {
		if wait := time.Until(s.start.Add(ev.At)); wait > 0 {
			time.Sleep(wait)
		}
		res := s.inject(t, ev.Fault)
		t.Logf("%s %s: recovered %v (canary %s) %s", res.At.Round(time.Second), res.Fault, res.Recovery, res.Canary, res.Error)
		report.Faults = append(report.Faults, res)
	}
	if wait := time.Until(s.start.Add(*flagDuration)); wait > 0 {
		time.Sleep(wait)
	}
	stopLoad()
	loadEnd := time.Now()
	load.Wait()
	// A tenant whose last publish was bad stays on the good one before it; a good one after
	// it is the end the invariants hold the tenant to.
	for _, tn := range s.tenants {
		if tn.lastIsBad() {
			s.canaryPush(t, tn)
		}
	}
	// The windowed target's last changes are committed on request, as a user would, until git
	// holds all of them (the mirror may see the last edits after a request).
	if err := s.retry(settleTimeout, func(ctx context.Context) error {
		if s.matchesCluster(ctx, s.windowed) == nil {
			return nil
		}
		if _, err := s.windowed.commitRequest(ctx, "soak: last changes"); err != nil {
			return err
		}
		return s.matchesCluster(ctx, s.windowed)
	}); err != nil {
		t.Errorf("the last CommitRequests: %v", err)
	}
	<-sampled
	report.Load = s.loadCounts(t)
	// A leader that took over near the end is given the time to settle.
	if end, ok := s.sampleLeader(t, settledLeader()+time.Minute); ok && referenceOK {
		report.Manager = []ManagerSample{reference, end}
	}
	report.Invariants = append(s.checkInvariants(t, report), rollbacks.invariant(loadEnd), crosstalk.invariant(), commits.invariant(report.Faults))

	dir := *flagReport
	if dir == "" {
		dir = t.TempDir()
	}
	// Written first: it names the heap profiles the table shows.
	path, err := report.Write(dir)
	var table strings.Builder
	report.Table(&table)
	t.Logf("report:\n%s", table.String())
	if err != nil {
		t.Errorf("write the report: %v", err)
	} else {
		t.Logf("report written to %s", path)
	}
	for _, f := range report.Failed() {
		t.Errorf("invariant %q did not hold: %s", f.Name, f.Detail)
	}
}

// pushLoop pushes a new edition to a random tenant every second until ctx ends; one push in
// five to a progressive tenant is a bad publish.
func (s *soak) pushLoop(ctx context.Context) {
	wait.UntilWithContext(ctx, func(context.Context) {
		tn := s.tenants[s.intN(len(s.tenants))]
		if tn.progressive && s.intN(5) == 0 {
			_, _ = tn.pushBad()
			return
		}
		_, _ = tn.push()
	}, time.Second)
}

// editLoop makes one of user's changes in m every 700 ms until ctx ends.
func (s *soak) editLoop(ctx context.Context, m *mirrorLoad, user string) {
	s.rngMu.Lock()
	rng := rand.New(rand.NewPCG(s.rng.Uint64(), s.rng.Uint64()))
	s.rngMu.Unlock()
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		m.userEdit(ectx, rng, user)
	}, 700*time.Millisecond)
}

// retry runs check every 200 ms until it returns nil or timeout passes; it returns the last
// error then.
func (s *soak) retry(timeout time.Duration, check func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := check(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// siteDecofile is the tenant's Decofile "site".
func (s *soak) siteDecofile(ctx context.Context, tn *tenant) (*decov1alpha1.Decofile, error) {
	var df decov1alpha1.Decofile
	err := s.C.Client.Get(ctx, client.ObjectKey{Namespace: tn.ns, Name: "site"}, &df)
	return &df, err
}

// decofileCommit is the commit the tenant's Decofile has stored (with notified, also with
// every pod notified of it).
func (s *soak) decofileCommit(ctx context.Context, tn *tenant, notified bool) (string, error) {
	df, err := s.siteDecofile(ctx, tn)
	if err != nil {
		return "", err
	}
	if !df.Status.ContentStored() {
		return "", fmt.Errorf("%s: Ready %+v", tn.name, meta.FindStatusCondition(df.Status.Conditions, decov1alpha1.ConditionReady))
	}
	if notified && !meta.IsStatusConditionTrue(df.Status.Conditions, decov1alpha1.ConditionPodsNotified) {
		return "", fmt.Errorf("%s at %.7s: PodsNotified %+v", tn.name, df.Status.GitHubCommit, meta.FindStatusCondition(df.Status.Conditions, decov1alpha1.ConditionPodsNotified))
	}
	return df.Status.GitHubCommit, nil
}
