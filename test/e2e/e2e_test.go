package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/siteops/siteops/internal/testenv"
	"github.com/siteops/siteops/test/internal/nodeenv"
)

// TestChartOnNode installs the chart on a real node and walks through every part, as ordered
// subtests sharing one API server, one node and one installation. Each step's wall time is
// logged in a table at the end (docs/development.md records measured ones).
func TestChartOnNode(t *testing.T) {
	if testing.Short() {
		t.Skip("installs the chart on a real node")
	}
	// Skip before starting anything when no node can run here.
	testenv.RequireNode(t)
	testenv.ImageArchive(t, "siteops-manager")
	testenv.ImageArchive(t, "siteops-site")
	c := testenv.APIServer(t)
	timings := &stepTimes{}
	defer timings.log(t)

	// Not a subtest: what it starts lives until the whole test ends.
	start := time.Now()
	e := &env{Env: nodeenv.New(t, c, nodeenv.Options{ValkeySentinels: true})}
	timings.add("0 probe image built, node Ready, servers started", time.Since(start), true)
	steps := []struct {
		name string
		run  func(*env, *testing.T)
	}{
		{"1 docs/get-started.md run: images pushed, chart installed, a site live from git, a cache user, a mirrored commit", (*env).getStarted},
		{"2 site Deployment: 3 injected pods serve the Decofile", (*env).siteServesDecofile},
		{"3 git edit rolled out to the pod IPs, decofile wait exits 0", (*env).gitEditRollsOut},
		{"4 large content: pods decode decofile.bin from the mounted file", (*env).largeContent},
		{"5 tenant pod: Valkey AUTH with injected credentials, other tenant refused", (*env).tenantCache},
		{"6 leader pod deleted: the other replica leads, an edit rolls out", (*env).leaderFailover},
		{"7 mirror: a user's ConfigMap edit reaches git with that author", (*env).mirrorEdit},
		{"8 mirror's Redis down: replicas stay Ready, workloads admitted, edits committed", (*env).mirrorRedisDown},
		{"9 a frozen pod misses a publish: trace names it behind, exits 0 once it caught up", (*env).traceNamesAPodBehind},
	}
	for _, s := range steps {
		if !timings.run(t, s.name, func(t *testing.T) { s.run(e, t) }) {
			t.Fatalf("step %q failed; the later steps build on it", s.name)
		}
	}
}

// stepTimes records each step's wall time.
type stepTimes struct {
	names []string
	took  []time.Duration
	ok    []bool
}

// run runs f as a subtest and records how long it took.
func (s *stepTimes) run(t *testing.T, name string, f func(*testing.T)) bool {
	start := time.Now()
	ok := t.Run(name, f)
	s.add(name, time.Since(start), ok)
	return ok
}

func (s *stepTimes) add(name string, took time.Duration, ok bool) {
	s.names = append(s.names, name)
	s.took = append(s.took, took)
	s.ok = append(s.ok, ok)
}

func (s *stepTimes) log(t *testing.T) {
	var b strings.Builder
	var total time.Duration
	fmt.Fprintf(&b, "%-84s %8s\n", "step", "time")
	for i, n := range s.names {
		mark := ""
		if !s.ok[i] {
			mark = " (failed)"
		}
		fmt.Fprintf(&b, "%-84s %7.1fs%s\n", n, s.took[i].Seconds(), mark)
		total += s.took[i]
	}
	fmt.Fprintf(&b, "%-84s %7.1fs\n", "total", total.Seconds())
	t.Logf("step times:\n%s", b.String())
}
