package mirror_test

import (
	"bytes"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/siteops/siteops/internal/testenv"
)

// watchFigures are the API server's open ConfigMap watches and the lines they came from.
type watchFigures struct {
	longrunning float64
	lines       []string
}

// configMapWatches reads the open ConfigMap watches from the API server's /metrics: only the
// server sees every watch, whoever opened it and however a client shares its connections.
func configMapWatches(b *testing.B, c *testenv.Cluster) watchFigures {
	n, lines := c.Metric(b, "apiserver_longrunning_requests", map[string]string{"verb": "WATCH", "resource": "configmaps"})
	if len(lines) == 0 {
		lines = []string{"(no apiserver_longrunning_requests line for WATCH configmaps)"}
	}
	return watchFigures{longrunning: n, lines: lines}
}

// cpuSeconds is the CPU time spent so far by the API server (its process_cpu_seconds_total),
// by this process (the manager, the clients and the git remote's HTTP side) and by the child
// processes that ended (the git remote's git http-backend and git receive-pack; etcd and the
// API server are children too, but still running, so not in it).
type cpuSeconds struct{ apiServer, self, gitChildren float64 }

// readCPU reads cpuSeconds now.
func readCPU(b *testing.B, c *testenv.Cluster) cpuSeconds {
	api, _ := c.Metric(b, "process_cpu_seconds_total", nil)
	seconds := func(who int) float64 {
		var ru syscall.Rusage
		if err := syscall.Getrusage(who, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	return cpuSeconds{apiServer: api, self: seconds(syscall.RUSAGE_SELF), gitChildren: seconds(syscall.RUSAGE_CHILDREN)}
}

// mirrorControllersBusy is the work queued in or running on the mirror's controllers
// (controller-runtime's workqueue_depth and active_workers), so that measuring at rest can wait
// for status writes to catch up. The gauges outlive a stopped manager with what its queues still
// held, so compare with a reading taken before the manager started.
func mirrorControllersBusy() float64 {
	mfs, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return 0
	}
	busy := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "workqueue_depth" && mf.GetName() != "controller_runtime_active_workers" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
				return (l.GetName() == "controller" || l.GetName() == "name") && strings.HasPrefix(l.GetValue(), "mirror-")
			}) {
				busy += m.GetGauge().GetValue()
			}
		}
	}
	return busy
}

// waitMirrorControllersIdle waits until the mirror's controllers are back to the work they had
// before the manager started (busy) on two readings in a row, and returns how long that took; it
// only logs when they are still busy after bound, as the figures are still worth having.
func waitMirrorControllersIdle(b *testing.B, busy float64, bound time.Duration) time.Duration {
	start := time.Now()
	calm := 0
	for {
		now := mirrorControllersBusy()
		if now > busy {
			calm = 0
		} else if calm++; calm == 2 {
			return time.Since(start)
		}
		if time.Since(start) > bound {
			b.Logf("the mirror's controllers still have %.0f requests queued or running after %s", now-busy, bound)
			return time.Since(start)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// heapInUseMiB collects garbage and returns the heap in use, so that what is measured is what
// is live (and the spans it occupies), not what awaits collection.
func heapInUseMiB() float64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapInuse) / (1 << 20)
}

// goroutinesOutsideRemote counts this process's goroutines except those serving connections to
// the in-process git remote, which stands in for a git host elsewhere; taken before and after
// the manager started, the difference is the manager's.
func goroutinesOutsideRemote() int {
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		return runtime.NumGoroutine()
	}
	total, count, serving := 0, 0, false
	flush := func() {
		if !serving {
			total += count
		}
		count, serving = 0, false
	}
	for line := range strings.Lines(buf.String()) {
		if at := strings.Index(line, " @ "); at > 0 && !strings.HasPrefix(line, "#") {
			flush()
			count, _ = strconv.Atoi(line[:at])
		} else if strings.Contains(line, "net/http.(*conn).serve") {
			serving = true
		}
	}
	flush()
	return total
}
