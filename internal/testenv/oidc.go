package testenv

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/siteops/siteops/internal/servers"
)

// OIDCIssuer is servers.OIDCIssuer serving HTTPS with a certificate of its own test CA.
type OIDCIssuer struct {
	*servers.OIDCIssuer
	// MTLS issued the serving certificate (for 127.0.0.1 and localhost): a client of the issuer
	// trusts MTLS.CAFile, a browser TrustCertificates(MTLS.CertDir).
	MTLS *MTLS
}

// NewOIDCIssuer starts an OIDC issuer over HTTPS for this test; o.CertDir is filled with a
// certificate of a fresh CA unless set.
func NewOIDCIssuer(t testing.TB, o servers.OIDCIssuerOptions) *OIDCIssuer {
	t.Helper()
	var m *MTLS
	if o.CertDir == "" {
		m = NewMTLS(t, "oidc-client", "127.0.0.1")
		o.CertDir = m.CertDir
	}
	i, err := servers.StartOIDCIssuer(context.Background(), o)
	if err != nil {
		t.Fatalf("start OIDC issuer: %v", err)
	}
	t.Cleanup(func() { _ = i.Stop() })
	return &OIDCIssuer{OIDCIssuer: i, MTLS: m}
}

// TrustCertificates makes Chromium accept the serving certificates (tls.crt) in certDirs,
// which a test CA signed: Chromium cannot be given a CA without a system NSS database, but
// --ignore-certificate-errors-spki-list takes the public keys of certificates to accept, and
// only those. Every other certificate error still fails the page.
func TrustCertificates(t testing.TB, certDirs ...string) chromedp.ExecAllocatorOption {
	t.Helper()
	var hashes []string
	for _, dir := range certDirs {
		b, err := os.ReadFile(filepath.Join(dir, "tls.crt"))
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(b)
		if block == nil {
			t.Fatalf("%s/tls.crt holds no PEM certificate", dir)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
		hashes = append(hashes, base64.StdEncoding.EncodeToString(sum[:]))
	}
	return chromedp.Flag("ignore-certificate-errors-spki-list", strings.Join(hashes, ","))
}
