package servers

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// MTLS is a throw-away certificate authority with a serving certificate and a client certificate
// it signed, for local servers that require client certificates (the mirror's audit receiver).
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

// NewMTLS creates a CA, a serving certificate for ips (and "localhost") and a client certificate
// with common name client, and writes ca.crt, tls.crt and tls.key into dir.
func NewMTLS(dir, client string, ips ...string) (*MTLS, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "siteops-local-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create CA: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	m := &MTLS{CAPEM: pemOf("CERTIFICATE", der), ca: ca, caKey: caKey, CertDir: dir, CAFile: filepath.Join(dir, "ca.crt")}
	var parsed []net.IP
	for _, ip := range ips {
		parsed = append(parsed, net.ParseIP(ip))
	}
	crt, key, err := m.Issue("server", x509.ExtKeyUsageServerAuth, parsed)
	if err != nil {
		return nil, err
	}
	if m.ClientCertPEM, m.ClientKeyPEM, err = m.Issue(client, x509.ExtKeyUsageClientAuth, nil); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	for name, b := range map[string][]byte{"ca.crt": m.CAPEM, "tls.crt": crt, "tls.key": key} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Issue signs a certificate for cn with usage; it returns the certificate and key PEM.
func (m *MTLS) Issue(cn string, usage x509.ExtKeyUsage, ips []net.IP) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return nil, nil, err
	}
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
		return nil, nil, fmt.Errorf("sign certificate for %s: %w", cn, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemOf("CERTIFICATE", der), pemOf("EC PRIVATE KEY", kder), nil
}

// ClientTLS is a client TLS config trusting the CA and presenting the client certificate.
func (m *MTLS) ClientTLS() (*tls.Config, error) {
	pair, err := tls.X509KeyPair(m.ClientCertPEM, m.ClientKeyPEM)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(m.CAPEM)
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

func pemOf(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
