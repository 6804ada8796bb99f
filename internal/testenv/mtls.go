package testenv

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"

	"github.com/siteops/siteops/internal/servers"
)

// MTLS is servers.MTLS with test-failing helpers; its files live in a test temp dir.
type MTLS struct{ *servers.MTLS }

// NewMTLS creates a CA, a serving certificate for ips (and "localhost"), and a client certificate
// with common name client.
func NewMTLS(t testing.TB, client string, ips ...string) *MTLS {
	t.Helper()
	m, err := servers.NewMTLS(t.TempDir(), client, ips...)
	if err != nil {
		t.Fatal(err)
	}
	return &MTLS{m}
}

// Issue signs a certificate for cn with usage; it returns the certificate and key PEM.
func (m *MTLS) Issue(t testing.TB, cn string, usage x509.ExtKeyUsage, ips []net.IP) (certPEM, keyPEM []byte) {
	t.Helper()
	c, k, err := m.MTLS.Issue(cn, usage, ips)
	if err != nil {
		t.Fatal(err)
	}
	return c, k
}

// ClientTLS is a client TLS config trusting the CA and presenting the client certificate.
func (m *MTLS) ClientTLS(t testing.TB) *tls.Config {
	t.Helper()
	c, err := m.MTLS.ClientTLS()
	if err != nil {
		t.Fatal(err)
	}
	return c
}
