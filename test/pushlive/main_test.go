// Package pushlive measures the whole way from a git push to every running pod confirming the
// new content, through the manager as siteops-manager builds it: the git remote's push event,
// the push receiver, the delivery controller (fetch, merge, encode, store), and the rollout to
// the pods. The pods are simulated site runtimes on loopback addresses behind Pod objects.
package pushlive

import (
	"testing"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
	"github.com/siteops/siteops/internal/testenv/simpods"
)

func TestMain(m *testing.M) {
	simpods.Main()
	ctrllog.SetLogger(logr.Discard())
	testenv.Main(m, servers.APIServerOptions{})
}
