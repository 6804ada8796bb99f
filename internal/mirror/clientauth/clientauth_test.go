package clientauth

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/siteops/siteops/internal/testenv"
)

func parse(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(certPEM)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestVerify(t *testing.T) {
	certs := testenv.NewMTLS(t, "kube-apiserver", "127.0.0.1")
	v, err := Load("--ca", certs.CAFile, []string{" kube-apiserver ", ""})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Verify([]*x509.Certificate{parse(t, certs.ClientCertPEM)}); err != nil {
		t.Fatalf("the API server's certificate: %v", err)
	}
	node, _ := certs.Issue(t, "system:node:worker-1", x509.ExtKeyUsageClientAuth, nil)
	if err := v.Verify([]*x509.Certificate{parse(t, node)}); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("another client of the CA: %v, want ErrNotAllowed", err)
	}
	// Issued certificates carry the DNS name localhost: a DNS name is accepted like a CN.
	if byDNS := (&Verifier{Roots: v.Roots, Names: []string{"localhost"}}); byDNS.Verify([]*x509.Certificate{parse(t, node)}) != nil {
		t.Fatal("a DNS subject alternative name in the list is not accepted")
	}
	server, _ := certs.Issue(t, "kube-apiserver", x509.ExtKeyUsageServerAuth, nil)
	if err := v.Verify([]*x509.Certificate{parse(t, server)}); err == nil || errors.Is(err, ErrNotAllowed) {
		t.Fatalf("a certificate without clientAuth: %v", err)
	}
	other := testenv.NewMTLS(t, "kube-apiserver", "127.0.0.1")
	if err := v.Verify([]*x509.Certificate{parse(t, other.ClientCertPEM)}); err == nil {
		t.Fatal("a certificate of another CA with the right name was accepted")
	}
	if err := v.Verify(nil); err == nil {
		t.Fatal("no certificate was accepted")
	}
	if _, err := Load("--ca", certs.CAFile, nil); err == nil || !strings.Contains(err.Error(), "names") {
		t.Fatalf("Load without names = %v", err)
	}
	if _, err := Load("--ca", "", []string{"x"}); err == nil {
		t.Fatal("Load without a CA succeeded")
	}
	rec := httptest.NewRecorder()
	v.Middleware(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusForbidden {
		t.Fatalf("a request without TLS: %d, want 403", rec.Code)
	}
	// A refused caller learns nothing about which names are accepted.
	req := httptest.NewRequest(http.MethodPost, "/", nil)
	req.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{parse(t, node)}}
	rec = httptest.NewRecorder()
	v.Middleware(http.NotFoundHandler()).ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden || strings.Contains(rec.Body.String(), "kube-apiserver") {
		t.Fatalf("a caller with another name: %d %q, want 403 naming nothing accepted", rec.Code, rec.Body.String())
	}
}
