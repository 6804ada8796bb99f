// Package e2e installs the siteops chart with the Helm Go SDK on a real node (kubelet,
// containerd, runc, kube-proxy) joined to a real API server, with the images `make image`
// builds, and follows a platform team's first day through it: the manager replicas and their
// webhooks, a site Deployment that gets its Decofile injected and hot-reloaded, large content,
// tenant cache credentials used by a real pod, a leader failover, and a ConfigMap edit mirrored
// into git under its author's name. Every server the pods talk to (git remote, Valkey, Redis)
// listens on the node's address on the machine's side, which pods reach and nothing outside
// the machine does.
package e2e

import (
	"testing"

	"github.com/siteops/siteops/test/internal/nodeenv"
)

func TestMain(m *testing.M) { nodeenv.Main(m) }
