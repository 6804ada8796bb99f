package soak

import (
	"flag"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/siteops/siteops/test/internal/nodeenv"
)

// The short profile is what `go test ./...` runs; `make soak` passes the hour-long one.
var (
	flagDuration = flag.Duration("soak.duration", 3*time.Minute, "how long load and faults run")
	flagSeed     = flag.Uint64("soak.seed", 20261202, "seed of the fault schedule and the load; the same seed replays the same schedule")
	flagTenants  = flag.Int("soak.tenants", 4, "tenant namespaces, each with a Decofile, 2 site pods and a cache probe pod")
	flagGap      = flag.Duration("soak.fault-gap", 16*time.Second, "time between two faults (each fault lands in the first half of its slot)")
	flagOutage   = flag.Duration("soak.outage", 10*time.Second, "how long the git remote refuses or answers slowly")
	flagReport   = flag.String("soak.report", "", "folder for report.json (default: the test's temporary folder, logged)")
)

func TestMain(m *testing.M) {
	// The test's own clients log nothing; the manager's log is in its pods.
	ctrllog.SetLogger(logr.Discard())
	nodeenv.Main(m)
}
