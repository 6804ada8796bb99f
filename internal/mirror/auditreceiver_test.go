package mirror_test

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/siteops/siteops/internal/mirror/attribution"
	"github.com/siteops/siteops/internal/mirror/audit"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// auditReceiver is the audit receiver a test's manager serves on a route: the address the API
// server posts to, its mTLS files, and the webhook configuration that makes the API server post.
type auditReceiver struct {
	route   string
	addr    string
	certs   *testenv.MTLS
	webhook *servers.AuditWebhook
}

// newAuditReceiver picks a loopback address for the manager's audit receiver on route and writes
// the API server's audit webhook configuration for it, logging testenv.ConfigMapAuditPolicy.
func newAuditReceiver(t testing.TB, route string) auditReceiver {
	t.Helper()
	ip := testenv.LoopbackIP()
	port, err := servers.FreePort(ip)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(ip, strconv.Itoa(port))
	certs := testenv.NewMTLS(t, "kube-apiserver", ip)
	aw, err := servers.WriteAuditWebhook(t.TempDir(), "https://"+addr+audit.PathPrefix+route, certs.MTLS, testenv.ConfigMapAuditPolicy)
	if err != nil {
		t.Fatal(err)
	}
	return auditReceiver{route: route, addr: addr, certs: certs, webhook: aw}
}

// options are the manager's attribution options that serve this receiver, waiting grace for facts.
func (r auditReceiver) options(grace time.Duration) attribution.Options {
	return attribution.Options{Enabled: true, Grace: grace, FactTTL: time.Minute, Route: r.route,
		ListenAddress: r.addr, CertDir: r.certs.CertDir, ClientCAFile: r.certs.CAFile, ClientNames: []string{"kube-apiserver"}}
}
