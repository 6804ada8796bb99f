// Package nodeenv is what the tests that run the chart on a real node share: an API server whose
// audit webhook reaches the manager pods through a relay, a node (kubelet, containerd, runc,
// kube-proxy) with the images `make image` builds, the servers the pods talk to on the node's
// machine-side address, the chart installed with the Helm Go SDK, and the reads a test makes of
// site pods. The end-to-end walk (test/e2e) and the chaos soak (test/soak) build on it.
package nodeenv

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/siteops/siteops/internal/mirror/audit"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// AuditRoute is the receiver route the API server's audit webhook posts to.
const AuditRoute = "e2e"

var (
	// auditRelay is where the API server's audit webhook posts: a TCP relay on the machine's
	// loopback to a Ready manager pod's audit port. The API server's flags are fixed before the
	// node (and so any pod address) exists, and pods come and go; TLS passes through untouched.
	auditRelay *relay
	// auditCerts is the audit receiver's serving certificate (for 127.0.0.1, the address the API
	// server dials) and the API server's client certificate, made when the API server starts.
	auditCerts *servers.MTLS
	// auditLog is the file the API server writes its audit events to as well (JSON lines).
	auditLog string
)

// AuditLog is the API server's audit log file (--audit-log-path, JSON lines, the audit policy
// of the webhook), for a replay with `siteops mirror verify`.
func AuditLog() string { return auditLog }

// Main starts the package's API server with what a node needs and an audit webhook to the
// relay, runs the tests, and stops everything; call it from TestMain.
func Main(m *testing.M) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodeenv: listen for the audit relay:", err)
		os.Exit(1)
	}
	auditRelay = newRelay(l)
	opts := testenv.NodeAPIServerOptions(servers.APIServerOptions{})
	nodeConfigure := opts.Configure
	opts.Configure = func(env *envtest.Environment) {
		nodeConfigure(env)
		// The node's certificate folder (the parent of the API server's cert-dir) is removed by
		// the next test binary once this process is gone; the audit files live there too.
		certDir := env.ControlPlane.GetAPIServer().CertDir
		if certDir == "" {
			fmt.Fprintln(os.Stderr, "nodeenv: the API server has no certificate folder for the audit files")
			return
		}
		dir := filepath.Join(filepath.Dir(certDir), "audit")
		certs, err := servers.NewMTLS(dir, "kube-apiserver", "127.0.0.1")
		if err != nil {
			fmt.Fprintln(os.Stderr, "nodeenv: audit certificates:", err)
			return
		}
		target := (&url.URL{Scheme: "https", Host: l.Addr().String(), Path: audit.PathPrefix + AuditRoute}).String()
		aw, err := servers.WriteAuditWebhook(dir, target, certs, servers.WriteAuditPolicy)
		if err != nil {
			fmt.Fprintln(os.Stderr, "nodeenv: audit webhook configuration:", err)
			return
		}
		aw.Configure(env)
		// The API server presents the same client certificate to the admission webhooks, so the
		// CommitRequest webhook (its CA is the chart's commitrequest-webhook-client-ca) admits it.
		ac, err := servers.WriteAdmissionClient(dir, certs, "*")
		if err != nil {
			fmt.Fprintln(os.Stderr, "nodeenv: admission client configuration:", err)
			return
		}
		ac.Configure(env)
		// Also to a file, for `siteops mirror verify` (AuditLog).
		auditLog = filepath.Join(dir, "audit.log")
		args := env.ControlPlane.GetAPIServer().Configure()
		args.Set("audit-log-path", auditLog)
		args.Set("audit-log-format", "json")
		auditCerts = certs
	}
	testenv.Main(m, opts)
}

// relay forwards each connection it accepts to the address its target function gives at that
// moment (none yet: the connection is closed, and the API server retries its batch).
type relay struct {
	l      net.Listener
	mu     sync.Mutex
	target func() (string, error)
}

func newRelay(l net.Listener) *relay {
	r := &relay{l: l}
	go r.serve()
	return r
}

// setTarget sets how the address to forward to is chosen; nil stops forwarding.
func (r *relay) setTarget(f func() (string, error)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.target = f
}

func (r *relay) serve() {
	for {
		c, err := r.l.Accept()
		if err != nil {
			return
		}
		go r.forward(c)
	}
}

func (r *relay) forward(c net.Conn) {
	defer c.Close()
	r.mu.Lock()
	target := r.target
	r.mu.Unlock()
	if target == nil {
		return
	}
	addr, err := target()
	if err != nil {
		return
	}
	up, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	<-done
}

// errNoTarget is returned by a target function that has no address to give.
var errNoTarget = errors.New("no Ready manager pod")

// HostPort joins an IP and a port.
func HostPort(ip string, port int) string { return net.JoinHostPort(ip, strconv.Itoa(port)) }
