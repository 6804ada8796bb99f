package node

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
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

// KubernetesServiceIP is the ClusterIP of the `kubernetes` Service with envtest's service range
// (10.0.0.0/24): pods reach the API server there.
const KubernetesServiceIP = "10.0.0.1"

// APIServerCerts are the serving certificate and service-account signing key of an API server
// whose pods talk to it in-cluster: the certificate names the `kubernetes` Service as well as
// the loopback address, so a pod's client verifies it.
type APIServerCerts struct {
	// Dir holds apiserver.crt, apiserver.key, sa-signer.crt and sa-signer.key (the names
	// envtest's cert-dir uses) and ca.crt.
	Dir string
	// CAPEM is the CA that signed apiserver.crt.
	CAPEM []byte
}

// NewAPIServerCerts writes a CA, a serving certificate for localhost, 127.0.0.1 and the
// `kubernetes` Service, and a service-account signing key into dir.
func NewAPIServerCerts(dir string) (*APIServerCerts, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "siteops-dev-apiserver-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("API server CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(KubernetesServiceIP)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("API server certificate: %w", err)
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	saTmpl := &x509.Certificate{SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "service-accounts"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(7 * 24 * time.Hour)}
	saDER, err := x509.CreateCertificate(rand.Reader, saTmpl, saTmpl, &saKey.PublicKey, saKey)
	if err != nil {
		return nil, fmt.Errorf("service-account signing certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	saKeyDER, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return nil, err
	}
	c := &APIServerCerts{Dir: dir, CAPEM: pemBlock("CERTIFICATE", caDER)}
	files := map[string][]byte{
		"ca.crt":        c.CAPEM,
		"apiserver.crt": pemBlock("CERTIFICATE", der),
		"apiserver.key": pemBlock("EC PRIVATE KEY", keyDER),
		"sa-signer.crt": pemBlock("CERTIFICATE", saDER),
		"sa-signer.key": pemBlock("EC PRIVATE KEY", saKeyDER),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
