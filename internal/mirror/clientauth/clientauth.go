// Package clientauth decides whether a TLS client certificate is one of the few identities an
// endpoint accepts (the API server calling the audit receiver or an admission webhook): it must
// chain to a configured CA bundle and name one of the allowed clients. A CA that signs the API
// server's client certificate usually signs many others (nodes, controllers, users), so the CA
// alone is not an identity.
package clientauth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"

	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// Verifier accepts client certificates that chain to Roots and whose common name or one of
// whose DNS names is in Names.
type Verifier struct {
	// Roots are the CAs client certificates must chain to.
	Roots *x509.CertPool
	// Names are the accepted identities (certificate common name or DNS subject alternative name).
	Names []string
}

// Load reads the PEM CA bundle caFile and returns a Verifier for names. flag names the CA's
// command-line flag in errors.
func Load(flag, caFile string, names []string) (*Verifier, error) {
	if caFile == "" {
		return nil, fmt.Errorf("%s is required: clients must authenticate with a certificate", flag)
	}
	names = clean(names)
	if len(names) == 0 {
		return nil, fmt.Errorf("%s needs the allowed client names: any certificate of the CA would be accepted otherwise", flag)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", flag, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: %s holds no PEM certificate", flag, caFile)
	}
	return &Verifier{Roots: pool, Names: names}, nil
}

func clean(names []string) []string {
	var out []string
	for _, n := range names {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// ErrNotAllowed says a client certificate is valid but names none of the accepted clients.
var ErrNotAllowed = errors.New("the client certificate names no accepted client")

// Allowed reports whether cert names one of the accepted clients, by common name or DNS name.
func (v *Verifier) Allowed(cert *x509.Certificate) bool {
	if slices.Contains(v.Names, cert.Subject.CommonName) {
		return true
	}
	for _, d := range cert.DNSNames {
		if slices.Contains(v.Names, d) {
			return true
		}
	}
	return false
}

// checkName returns ErrNotAllowed, naming the certificate's common name (not a secret), when the
// leaf certificate is not an accepted client.
func (v *Verifier) checkName(leaf *x509.Certificate) error {
	if !v.Allowed(leaf) {
		return fmt.Errorf("%w (common name %q; accepted: %s)", ErrNotAllowed, leaf.Subject.CommonName, strings.Join(v.Names, ", "))
	}
	return nil
}

// Verify checks a client's certificate chain (leaf first): it must chain to Roots for client
// authentication and name an accepted client.
func (v *Verifier) Verify(certs []*x509.Certificate) error {
	if len(certs) == 0 {
		return errors.New("no client certificate presented")
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: v.Roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Errorf("verify the client certificate: %w", err)
	}
	return v.checkName(certs[0])
}

// ServerTLS sets c to require a client certificate chaining to Roots and naming an accepted
// client, refusing anything else in the TLS handshake.
func (v *Verifier) ServerTLS(c *tls.Config) {
	c.ClientAuth = tls.RequireAndVerifyClientCert
	c.ClientCAs = v.Roots
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("no client certificate presented")
		}
		return v.checkName(cs.PeerCertificates[0])
	}
}

// RequestClientCert makes a TLS server shared with other endpoints ask clients for a certificate
// without requiring one, so that Middleware can check it on its own paths only.
func RequestClientCert(c *tls.Config) {
	if c.ClientAuth < tls.RequestClientCert {
		c.ClientAuth = tls.RequestClientCert
	}
}

// Middleware answers 403 to requests whose TLS client certificate Verify refuses, and passes the
// others to next. The TLS server must request client certificates (see RequestClientCert).
func (v *Verifier) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			http.Error(w, "client certificate required: this endpoint is served over TLS only", http.StatusForbidden)
			return
		}
		if err := v.Verify(r.TLS.PeerCertificates); err != nil {
			// Logged so a missing API server client certificate is found, not only attacks.
			logf.FromContext(r.Context()).Info("refused a caller without an accepted client certificate", "path", r.URL.Path, "remote", r.RemoteAddr, "reason", err.Error())
			http.Error(w, "client not allowed", http.StatusForbidden) // the reason (accepted names) is logged, not told to the caller
			return
		}
		next.ServeHTTP(w, r)
	})
}
