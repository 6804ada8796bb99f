package soak

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/test/cacheprobe/result"
	"github.com/siteops/siteops/test/internal/nodeenv"
)

// settleTimeout is how long the end state may take to settle once load has stopped.
const settleTimeout = 3 * time.Minute

// stableAfter is the shortest run whose memory and goroutine figures are held to the 20 % rule;
// shorter runs report them.
const stableAfter = 20 * time.Minute

var httpClient = &http.Client{Timeout: 5 * time.Second}

// pprofPort is where the soak's managers serve /debug/pprof (off in the chart's defaults).
const pprofPort = 8082

// probes reads every tenant's cache probe.
func (s *soak) probes(ctx context.Context) (map[string]result.Counts, error) {
	out := map[string]result.Counts{}
	for _, tn := range s.tenants {
		pods, err := s.ReadyPodsNow(ctx, tn.ns, "cacheprobe")
		if err != nil {
			return nil, err
		}
		if len(pods) != 1 {
			return nil, fmt.Errorf("%s: %d Ready cache probe pods", tn.name, len(pods))
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+nodeenv.HostPort(pods[0].Status.PodIP, probePort), nil)
		resp, err := httpClient.Do(req)
		if err != nil {
			return nil, fmt.Errorf("%s's probe: %w", tn.name, err)
		}
		var c result.Counts
		err = json.NewDecoder(resp.Body).Decode(&c)
		_ = resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("%s's probe: %w", tn.name, err)
		}
		out[tn.name] = c
	}
	return out, nil
}

// loadCounts sums what was sent.
func (s *soak) loadCounts(t *testing.T) Load {
	var l Load
	for _, tn := range s.tenants {
		tn.mu.Lock()
		l.Pushes += len(tn.pushed)
		l.PushesRefused += tn.pushFailures
		tn.mu.Unlock()
	}
	for _, m := range s.mirrors() {
		l.MirrorEdits += m.edits.Load()
		l.MirrorRefused += m.refused.Load()
	}
	probes, err := s.probes(context.Background())
	if err != nil {
		t.Errorf("read the cache probes: %v", err)
	}
	for _, p := range probes {
		l.CacheRounds += p.OwnOK + p.OwnFailed
		l.CacheFailed += p.OwnFailed
		l.CacheLockoutMax = max(l.CacheLockoutMax, time.Duration(p.LockoutMaxMillis)*time.Millisecond)
	}
	return l
}

// settledLeader is how long a manager must have held the Lease before its memory is sampled:
// a leader that just took over is listing every object and replaying the mirror, and its heap
// says how much that takes, not what it keeps. A short run waits for a sixth of its length.
func settledLeader() time.Duration { return min(3*time.Minute, *flagDuration/6) }

// sampleLeader reads the live heap and goroutines of a leader that has held the Lease for at
// least settledLeader, from its metrics endpoint, waiting up to wait for one (while a leader is
// elected, or a new one settles); a run whose sample failed reports it.
func (s *soak) sampleLeader(t *testing.T, wait time.Duration) (ManagerSample, bool) {
	var sample ManagerSample
	err := s.retry(wait, func(ctx context.Context) error {
		leading, err := s.leaderFor(ctx)
		if err != nil {
			return err
		}
		if leading < settledLeader() {
			return fmt.Errorf("the leader has held the Lease for %s, less than %s", leading.Round(time.Second), settledLeader())
		}
		if sample, err = s.readLeaderMetrics(ctx); err == nil {
			sample.Leading = leading
		}
		return err
	})
	if err != nil {
		t.Logf("no sample of the leader's memory: %v", err)
		return sample, false
	}
	return sample, true
}

// leaderFor is how long the Lease's holder has held it (since its acquireTime).
func (s *soak) leaderFor(ctx context.Context) (time.Duration, error) {
	var l coordinationv1.Lease
	if err := s.C.Client.Get(ctx, client.ObjectKey{Namespace: s.Release, Name: nodeenv.LeaseName}, &l); err != nil {
		return 0, fmt.Errorf("read the leader Lease: %w", err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" || l.Spec.AcquireTime == nil {
		return 0, errors.New("the leader Lease has no holder")
	}
	return time.Since(l.Spec.AcquireTime.Time), nil
}

// heapRounds are the forced collections a sample takes, heapRoundGap apart: the live heap of
// one collection counts the content and encoders in flight at that moment, so the sample is
// the least of them, the heap the manager keeps.
const (
	heapRounds   = 5
	heapRoundGap = 2 * time.Second
)

// readLeaderMetrics samples the leader heapRounds times and keeps the round with the least
// live heap, and the fewest goroutines seen.
func (s *soak) readLeaderMetrics(ctx context.Context) (ManagerSample, error) {
	holder := s.LeaseHolder(ctx)
	var pod corev1.Pod
	if err := s.C.Client.Get(ctx, client.ObjectKey{Namespace: s.Release, Name: holder}, &pod); err != nil {
		return ManagerSample{}, fmt.Errorf("leader pod %q: %w", holder, err)
	}
	var least ManagerSample
	fewest := math.Inf(1)
	for i := range heapRounds {
		if i > 0 {
			time.Sleep(heapRoundGap)
		}
		round, err := s.readManager(ctx, &pod)
		if err != nil {
			return round, err
		}
		fewest = min(fewest, round.Goroutines)
		if i == 0 || round.LiveHeapBytes < least.LiveHeapBytes {
			least = round
		}
	}
	least.Goroutines = fewest
	return least, nil
}

// readManager forces a collection in pod (by reading its heap profile, which it keeps), then
// reads the live heap and goroutines from its metrics.
func (s *soak) readManager(ctx context.Context, pod *corev1.Pod) (ManagerSample, error) {
	sample := ManagerSample{At: time.Since(s.start), Pod: pod.Name}
	profile, err := nodeenv.GetOK(ctx, "http://"+nodeenv.HostPort(pod.Status.PodIP, pprofPort)+"/debug/pprof/heap?gc=1")
	if err != nil {
		return sample, fmt.Errorf("heap profile of %s: %w", pod.Name, err)
	}
	sample.heapProfile = profile
	metrics, err := nodeenv.GetOK(ctx, "http://"+nodeenv.HostPort(pod.Status.PodIP, nodeenv.MetricsPort)+"/metrics")
	if err != nil {
		return sample, fmt.Errorf("metrics of %s: %w", pod.Name, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(metrics))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			continue
		}
		switch name {
		case "go_gc_heap_live_bytes":
			sample.LiveHeapBytes = v
		case "go_memstats_heap_inuse_bytes":
			sample.HeapBytes = v
		case "go_goroutines":
			sample.Goroutines = v
		}
	}
	if sample.LiveHeapBytes == 0 || sample.Goroutines == 0 {
		return sample, fmt.Errorf("metrics of %s lack the Go runtime's heap or goroutines", pod.Name)
	}
	if err := sc.Err(); err != nil {
		return sample, fmt.Errorf("metrics of %s: %w", pod.Name, err)
	}
	return sample, nil
}

// checkInvariants waits for the end state to settle and checks every invariant.
func (s *soak) checkInvariants(t *testing.T, r *Report) []Invariant {
	var out []Invariant
	check := func(name string, err error) {
		inv := Invariant{Name: name, Held: err == nil}
		if err != nil {
			inv.Detail = err.Error()
		}
		out = append(out, inv)
	}
	check("every Decofile Ready at its last push, every pod notified", s.retry(settleTimeout, func(ctx context.Context) error {
		for _, tn := range s.tenants {
			sha, err := s.decofileCommit(ctx, tn, true)
			if err != nil {
				return err
			}
			if last, _ := tn.last(); sha != last {
				return fmt.Errorf("%s at %.7s (push %d), last push %.7s", tn.name, sha, tn.pushedIndex(sha), last)
			}
		}
		return nil
	}))
	check("every site pod serves its tenant's last content at the end", s.retry(settleTimeout, s.podsServeLastContent))
	check("large sites stored as decofile.bin", s.largeStoredAsBin(context.Background()))
	check("s3 sites' objects hold their last content", s.retry(settleTimeout, s.s3ObjectsHoldLastContent))
	check("the mirror's tree equals the cluster", s.retry(settleTimeout, s.mirrorMatchesCluster))
	authors, err := s.checkAuthors()
	if err == nil && authors.Wrong > 0 {
		err = fmt.Errorf("%d commits under a wrong author: %s", authors.Wrong, strings.Join(authors.WrongExamples, "; "))
	}
	check("no change committed under a wrong author", err)
	if err == nil {
		out[len(out)-1].Detail = fmt.Sprintf("%d commits attributed to their user, %d to the committer", authors.Attributed, authors.ByCommitter)
	}
	verified, err := s.verifyAuthors()
	check("the audit log names every change's author (siteops mirror verify)", err)
	if err == nil {
		out[len(out)-1].Detail = verified
	}
	check("every tenant user on every Valkey node", s.retry(settleTimeout, s.usersOnAllNodes))
	probes, err := s.probes(context.Background())
	if err == nil {
		for name, p := range probes {
			if p.OtherRead > 0 {
				err = fmt.Errorf("%s's probe read another tenant's key %d times", name, p.OtherRead)
			}
			if p.OtherRefused == 0 {
				err = fmt.Errorf("%s's probe was never refused another tenant's key: the probe did not run", name)
			}
		}
	}
	check("no tenant ever read another tenant's key", err)
	var unrecovered []string
	for _, f := range r.Faults {
		if f.Error != "" {
			unrecovered = append(unrecovered, fmt.Sprintf("%s at %s: %s", f.Fault, f.At.Round(time.Second), f.Error))
		}
	}
	err = nil
	if len(unrecovered) > 0 {
		err = fmt.Errorf("%s", strings.Join(unrecovered, "; "))
	}
	check("every fault recovered", err)
	out = append(out, memoryStable(r))
	return out
}

// largeStoredAsBin reports nil when every large tenant's Decofile is stored compressed.
func (s *soak) largeStoredAsBin(ctx context.Context) error {
	large := 0
	for _, tn := range s.tenants {
		if !tn.large {
			continue
		}
		large++
		df, err := s.siteDecofile(ctx, tn)
		if err != nil {
			return err
		}
		if df.Status.Format != decov1alpha1.FormatBin {
			return fmt.Errorf("%s: %d bytes stored as %q, want %s", tn.name, df.Status.RawBytes, df.Status.Format, decov1alpha1.KeyBin)
		}
	}
	if large == 0 {
		return fmt.Errorf("no large tenant among %d: run at least 3", len(s.tenants))
	}
	return nil
}

// s3ObjectsHoldLastContent reports nil when every s3 tenant's object, read through the CDN as
// its pods read it, says the tenant's last title.
func (s *soak) s3ObjectsHoldLastContent(ctx context.Context) error {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.S3.CA)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer hc.CloseIdleConnections()
	n := 0
	for _, tn := range s.tenants {
		if !tn.s3 {
			continue
		}
		n++
		df, err := s.siteDecofile(ctx, tn)
		if err != nil {
			return err
		}
		if df.Status.S3URL == "" {
			return fmt.Errorf("%s: no status.s3URL", tn.name)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, df.Status.S3URL, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return fmt.Errorf("%s: %w", tn.name, err)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("%s: GET %s: read the body: %w", tn.name, df.Status.S3URL, err)
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: GET %s: HTTP %d", tn.name, df.Status.S3URL, resp.StatusCode)
		}
		if _, title := tn.last(); !strings.Contains(string(body), title) {
			return fmt.Errorf("%s: the object at %s holds %.120s, want %q", tn.name, df.Status.S3URL, body, title)
		}
	}
	if n == 0 {
		return fmt.Errorf("no s3 tenant among %d: run at least 4", len(s.tenants))
	}
	return nil
}

// podsServeLastContent reports nil when every Ready site pod serves its Decofile's content
// hash, which says the tenant's last title and names no other tenant.
func (s *soak) podsServeLastContent(ctx context.Context) error {
	for _, tn := range s.tenants {
		df, err := s.siteDecofile(ctx, tn)
		if err != nil {
			return err
		}
		pods, err := s.ReadyPodsNow(ctx, tn.ns, "site")
		if err != nil {
			return err
		}
		if len(pods) != 2 {
			return fmt.Errorf("%s: %d site pods Ready, want 2", tn.name, len(pods))
		}
		_, title := tn.last()
		for _, p := range pods {
			info, err := nodeenv.FetchPodInfo(ctx, p.Status.PodIP)
			if err != nil {
				return err
			}
			if info.ContentHash != df.Status.ContentHash {
				return fmt.Errorf("%s pod %s serves %.12s, the Decofile's is %.12s", tn.name, p.Name, info.ContentHash, df.Status.ContentHash)
			}
			body, err := nodeenv.FetchPodContent(ctx, p.Status.PodIP)
			if err != nil {
				return err
			}
			if !strings.Contains(body, title) {
				return fmt.Errorf("%s pod %s serves %.120s, want %q", tn.name, p.Name, body, title)
			}
			if other := s.foreignTenant(tn, body); other != nil {
				return fmt.Errorf("%s pod %s serves content of %s", tn.name, p.Name, other.name)
			}
		}
	}
	return nil
}

// foreignTenant is the tenant other than tn whose title body holds, or nil.
func (s *soak) foreignTenant(tn *tenant, body string) *tenant {
	for _, other := range s.tenants {
		if other != tn && strings.Contains(body, other.name+" ") {
			return other
		}
	}
	return nil
}

// memoryStable holds the leader's live heap and goroutines at the end to within 20 % of the
// reference point, for runs long enough to say so. Both are samples of a settled leader (the
// end's is often another pod than the reference's, after the leader kills).
func memoryStable(r *Report) Invariant {
	inv := Invariant{Name: "manager memory and goroutines stable", Held: true}
	if len(r.Manager) != 2 {
		inv.Held, inv.Detail = false, fmt.Sprintf("%d samples of the leader, want 2", len(r.Manager))
		return inv
	}
	ref, end := r.Manager[0], r.Manager[1]
	inv.Detail = fmt.Sprintf("live heap %.1f → %.1f MiB, goroutines %.0f → %.0f", ref.LiveHeapBytes/(1<<20), end.LiveHeapBytes/(1<<20), ref.Goroutines, end.Goroutines)
	if r.Duration < stableAfter {
		inv.Detail += fmt.Sprintf(" (reported only: runs under %s)", stableAfter)
		return inv
	}
	// The live heap, not the heap in use: with GOGC at 100 the heap in use reaches twice the
	// live heap before each GC, so one sample of it says when the GC last ran, not what is kept.
	if end.LiveHeapBytes > 1.2*ref.LiveHeapBytes || end.Goroutines > 1.2*ref.Goroutines {
		inv.Held = false
	}
	return inv
}
