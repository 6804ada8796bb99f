package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// MTLS is a throw-away certificate authority with a serving certificate and a client certificate
// it signed, for tests of servers that require client certificates.
type MTLS struct {
	// CAPEM is the CA certificate; CAFile holds it.
	CAPEM  []byte
	CAFile string
	// CertDir holds the serving certificate tls.crt and key tls.key.
	CertDir string
	// ClientCertPEM and ClientKeyPEM are a client certificate signed by the CA.
	ClientCertPEM, ClientKeyPEM []byte

	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
}

// NewMTLS creates a CA, a serving certificate for ips (and "localhost"), and a client certificate
// with common name client; files go to a test temp dir.
func NewMTLS(t testing.TB, client string, ips ...string) *MTLS {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	m := &MTLS{CAPEM: pemOf("CERTIFICATE", der), ca: ca, caKey: caKey, CertDir: t.TempDir()}
	m.CAFile = filepath.Join(m.CertDir, "ca.crt")
	var parsed []net.IP
	for _, ip := range ips {
		parsed = append(parsed, net.ParseIP(ip))
	}
	crt, key := m.Issue(t, "server", x509.ExtKeyUsageServerAuth, parsed)
	m.ClientCertPEM, m.ClientKeyPEM = m.Issue(t, client, x509.ExtKeyUsageClientAuth, nil)
	for name, b := range map[string][]byte{"ca.crt": m.CAPEM, "tls.crt": crt, "tls.key": key} {
		if err := os.WriteFile(filepath.Join(m.CertDir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// Issue signs a certificate for cn with usage; it returns the certificate and key PEM.
func (m *MTLS) Issue(t testing.TB, cn string, usage x509.ExtKeyUsage, ips []net.IP) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		IPAddresses:  ips,
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, m.ca, &key.PublicKey, m.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pemOf("CERTIFICATE", der), pemOf("EC PRIVATE KEY", kder)
}

// ClientTLS is a client TLS config trusting the CA and presenting the client certificate.
func (m *MTLS) ClientTLS(t testing.TB) *tls.Config {
	t.Helper()
	pair, err := tls.X509KeyPair(m.ClientCertPEM, m.ClientKeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(m.CAPEM)
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
}

func pemOf(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
