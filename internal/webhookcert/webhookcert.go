// Package webhookcert gives the admission webhook server TLS without cert-manager: it keeps a
// self-signed CA and a serving certificate signed by it in the webhook cert folder, puts the CA
// into the caBundle of the webhook configurations, and renews both before they expire. The
// webhook server's certificate watcher picks up renewed files without a restart.
package webhookcert

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// File names in the cert folder. tls.crt and tls.key are what controller-runtime's webhook
// server reads; ca.crt is the caBundle (current CA first, then earlier CAs still valid).
const (
	CertFile  = "tls.crt"
	KeyFile   = "tls.key"
	CAFile    = "ca.crt"
	CAKeyFile = "ca.key"
)

// Options configures a Rotator.
type Options struct {
	// CertDir is the webhook server's certificate folder.
	CertDir string
	// Hosts are the DNS names and IP addresses the serving certificate is valid for.
	Hosts []string
	// MutatingWebhooks and ValidatingWebhooks name the configurations whose caBundle is kept
	// equal to the CA file. Configurations that do not exist are skipped.
	MutatingWebhooks   []string
	ValidatingWebhooks []string
	// CASecret, when set, holds the CA (keys ca.crt and ca.key) so that every replica serves a
	// certificate from the same CA and the caBundle they write agrees. Without it the CA lives
	// only in CertDir, which suits one replica (and `siteops dev up`).
	CASecret types.NamespacedName
	// CAValidity is how long a new CA is valid (default 2 years).
	CAValidity time.Duration
	// CertValidity is how long a new serving certificate is valid (default 90 days).
	CertValidity time.Duration
	// RenewBefore renews the serving certificate this long before it expires (default a third
	// of CertValidity). The CA is renewed once a new serving certificate would outlive it.
	RenewBefore time.Duration
	// CheckInterval is how often Start checks the certificates (default 1 hour).
	CheckInterval time.Duration
	// Now returns the current time; tests move it forward.
	Now func() time.Time
}

func (o *Options) defaults() {
	if o.CAValidity == 0 {
		o.CAValidity = 2 * 365 * 24 * time.Hour
	}
	if o.CertValidity == 0 {
		o.CertValidity = 90 * 24 * time.Hour
	}
	if o.RenewBefore == 0 {
		o.RenewBefore = o.CertValidity / 3
	}
	if o.CheckInterval == 0 {
		o.CheckInterval = time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create;update
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=mutatingwebhookconfigurations;validatingwebhookconfigurations,verbs=get;update

// Rotator keeps the certificates in Options.CertDir valid and the caBundles in step.
type Rotator struct {
	client client.Client
	o      Options
}

// New returns a Rotator patching webhook configurations through c (an uncached client: it
// runs before the manager's caches start).
func New(c client.Client, o Options) (*Rotator, error) {
	o.defaults()
	if o.CertDir == "" {
		return nil, errors.New("webhookcert: CertDir is empty: set --webhook-cert-dir")
	}
	if len(o.Hosts) == 0 {
		return nil, errors.New("webhookcert: no host names: set --webhook-cert-hosts to the webhook Service's DNS name")
	}
	if o.RenewBefore >= o.CertValidity {
		return nil, fmt.Errorf("webhookcert: RenewBefore (%s) must be shorter than CertValidity (%s)", o.RenewBefore, o.CertValidity)
	}
	return &Rotator{client: c, o: o}, nil
}

// Result tells what Ensure did.
type Result struct {
	// CABundle is the PEM the webhook configurations trust.
	CABundle []byte
	// CARenewed and CertRenewed say which certificates were (re)generated.
	CARenewed, CertRenewed bool
}

// Ensure makes the cert folder hold a valid CA and serving certificate, renewing what is
// missing, unreadable, about to expire or issued for other hosts, and patches the caBundles.
// When the CA changes, the caBundle (holding old and new CA) is patched before the new serving
// certificate is written, so the API server trusts it by the time the server presents it.
func (r *Rotator) Ensure(ctx context.Context) (Result, error) {
	if err := os.MkdirAll(r.o.CertDir, 0o700); err != nil {
		return Result{}, fmt.Errorf("create webhook cert folder: %w", err)
	}
	now := r.o.Now()
	var res Result
	var (
		ca     *x509.Certificate
		caKey  *ecdsa.PrivateKey
		bundle []*x509.Certificate
		err    error
	)
	// Replicas sharing the CA Secret may renew it at the same moment: the loser of the
	// optimistic write adopts the winner's CA.
	for attempt := 0; ; attempt++ {
		ca, caKey, bundle, res.CARenewed, err = r.ensureCA(ctx, now)
		if err == nil {
			break
		}
		if !errors.Is(err, errCAConflict) || attempt == 2 {
			return Result{}, err
		}
	}
	res.CABundle = encodeCerts(bundle)

	patchErr := r.PatchCABundles(ctx, res.CABundle)

	if r.certValid(now, ca) {
		return res, patchErr
	}
	if patchErr != nil && res.CARenewed && r.certValid(now, nil) {
		// Keep serving the old certificate until the API server trusts the new CA.
		return res, patchErr
	}
	certPEM, keyPEM, err := newServingCert(now, r.o.CertValidity, r.o.Hosts, ca, caKey)
	if err != nil {
		return res, err
	}
	// Key first: the certificate watcher reloads when tls.crt changes and reads both.
	if err := writeFile(r.o.CertDir, KeyFile, keyPEM); err != nil {
		return res, err
	}
	if err := writeFile(r.o.CertDir, CertFile, certPEM); err != nil {
		return res, err
	}
	res.CertRenewed = true
	return res, patchErr
}

var errCAConflict = errors.New("the CA Secret changed concurrently")

// ensureCA returns a CA valid long enough to sign a new serving certificate, and the bundle of
// CAs to trust, generating or pruning as needed. With a CA Secret, the Secret is the source of
// truth, mirrored into the cert folder.
func (r *Rotator) ensureCA(ctx context.Context, now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, []*x509.Certificate, bool, error) {
	var secret *corev1.Secret
	if r.o.CASecret.Name != "" {
		secret = &corev1.Secret{}
		err := r.client.Get(ctx, r.o.CASecret, secret)
		switch {
		case apierrors.IsNotFound(err):
			secret = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.o.CASecret.Namespace, Name: r.o.CASecret.Name}}
		case err != nil:
			return nil, nil, nil, false, fmt.Errorf("read CA Secret %s: %w", r.o.CASecret, err)
		default:
			for _, f := range []string{CAFile, CAKeyFile} {
				if err := writeFile(r.o.CertDir, f, secret.Data[f]); err != nil {
					return nil, nil, nil, false, err
				}
			}
		}
	}

	ca, caKey, bundle := r.loadCA(now)
	renewed, changed := false, false
	if ca == nil || now.Add(r.o.CertValidity).After(ca.NotAfter) {
		newCA, newKey, err := newCA(now, r.o.CAValidity)
		if err != nil {
			return nil, nil, nil, false, err
		}
		// Earlier CAs stay trusted while they are valid: serving certificates they signed may
		// still be in use (by this or another replica) until they are replaced.
		ca, caKey, bundle = newCA, newKey, append([]*x509.Certificate{newCA}, unexpired(bundle, now)...)
		renewed, changed = true, true
	} else if valid := unexpired(bundle, now); len(valid) != len(bundle) {
		// Drop CAs that expired: nothing they signed can be served any more.
		bundle, changed = valid, true
	}
	if !changed {
		return ca, caKey, bundle, false, nil
	}
	keyDER, err := x509.MarshalECPrivateKey(caKey)
	if err != nil {
		return nil, nil, nil, false, fmt.Errorf("encode CA key: %w", err)
	}
	data := map[string][]byte{CAFile: encodeCerts(bundle), CAKeyFile: pemBlock("EC PRIVATE KEY", keyDER)}
	if secret != nil {
		secret.Data = data
		if secret.ResourceVersion == "" {
			err = r.client.Create(ctx, secret)
		} else {
			err = r.client.Update(ctx, secret)
		}
		if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
			return nil, nil, nil, false, errCAConflict
		}
		if err != nil {
			return nil, nil, nil, false, fmt.Errorf("write CA Secret %s: %w", r.o.CASecret, err)
		}
	}
	for _, f := range []string{CAKeyFile, CAFile} {
		if err := writeFile(r.o.CertDir, f, data[f]); err != nil {
			return nil, nil, nil, false, err
		}
	}
	return ca, caKey, bundle, renewed, nil
}

// Start checks the certificates every CheckInterval until ctx ends (a manager Runnable).
func (r *Rotator) Start(ctx context.Context) error {
	log := logf.FromContext(ctx).WithName("webhookcert")
	t := time.NewTicker(r.o.CheckInterval)
	defer t.Stop()
	for {
		res, err := r.Ensure(ctx)
		if err != nil {
			log.Error(err, "webhook certificates not up to date; retrying at the next check", "interval", r.o.CheckInterval)
		} else if res.CARenewed || res.CertRenewed {
			log.Info("webhook certificates renewed", "ca", res.CARenewed, "cert", res.CertRenewed)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// NeedLeaderElection is false: every replica serves webhooks and needs its own certificate.
func (r *Rotator) NeedLeaderElection() bool { return false }

// PatchCABundles sets caBundle of every webhook in the configured configurations.
func (r *Rotator) PatchCABundles(ctx context.Context, caBundle []byte) error {
	var errs []error
	for _, name := range r.o.MutatingWebhooks {
		errs = append(errs, r.patch(ctx, name, &admissionregistrationv1.MutatingWebhookConfiguration{}, func(o client.Object) bool {
			cfg := o.(*admissionregistrationv1.MutatingWebhookConfiguration)
			changed := false
			for i := range cfg.Webhooks {
				if !bytes.Equal(cfg.Webhooks[i].ClientConfig.CABundle, caBundle) {
					cfg.Webhooks[i].ClientConfig.CABundle, changed = caBundle, true
				}
			}
			return changed
		}))
	}
	for _, name := range r.o.ValidatingWebhooks {
		errs = append(errs, r.patch(ctx, name, &admissionregistrationv1.ValidatingWebhookConfiguration{}, func(o client.Object) bool {
			cfg := o.(*admissionregistrationv1.ValidatingWebhookConfiguration)
			changed := false
			for i := range cfg.Webhooks {
				if !bytes.Equal(cfg.Webhooks[i].ClientConfig.CABundle, caBundle) {
					cfg.Webhooks[i].ClientConfig.CABundle, changed = caBundle, true
				}
			}
			return changed
		}))
	}
	return errors.Join(errs...)
}

func (r *Rotator) patch(ctx context.Context, name string, obj client.Object, set func(client.Object) bool) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := r.client.Get(ctx, types.NamespacedName{Name: name}, obj); err != nil {
			return err
		}
		if !set(obj) {
			return nil
		}
		return r.client.Update(ctx, obj)
	})
	if apierrors.IsNotFound(err) {
		return nil // not installed (yet); the next check patches it
	}
	if err != nil {
		return fmt.Errorf("set caBundle of %T %s: %w", obj, name, err)
	}
	return nil
}

// loadCA reads the CA certificate(s) and key; nil when missing or unusable.
func (r *Rotator) loadCA(now time.Time) (*x509.Certificate, *ecdsa.PrivateKey, []*x509.Certificate) {
	certPEM, err1 := os.ReadFile(filepath.Join(r.o.CertDir, CAFile))
	keyPEM, err2 := os.ReadFile(filepath.Join(r.o.CertDir, CAKeyFile))
	if err1 != nil || err2 != nil {
		return nil, nil, nil
	}
	certs := decodeCerts(certPEM)
	if len(certs) == 0 {
		return nil, nil, nil
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, nil, certs
	}
	key, err := x509.ParseECPrivateKey(block.Bytes)
	if err != nil || !key.PublicKey.Equal(certs[0].PublicKey) || !certs[0].IsCA || now.Before(certs[0].NotBefore) {
		return nil, nil, certs
	}
	return certs[0], key, certs
}

// certValid reports whether the serving certificate on disk is usable until RenewBefore ahead,
// covers every host, and (when ca is set) was signed by ca.
func (r *Rotator) certValid(now time.Time, ca *x509.Certificate) bool {
	pair, err := tls.LoadX509KeyPair(filepath.Join(r.o.CertDir, CertFile), filepath.Join(r.o.CertDir, KeyFile))
	if err != nil || len(pair.Certificate) == 0 {
		return false
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil || now.Before(leaf.NotBefore) {
		return false
	}
	if ca != nil {
		if !now.Add(r.o.RenewBefore).Before(leaf.NotAfter) {
			return false
		}
		roots := x509.NewCertPool()
		roots.AddCert(ca)
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			return false
		}
	} else if !now.Before(leaf.NotAfter) {
		return false
	}
	for _, h := range r.o.Hosts {
		if leaf.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

func newCA(now time.Time, validity time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "siteops-webhook-ca", Organization: []string{"siteops"}},
		NotBefore:             now.Add(-time.Hour), // tolerate clock skew between manager and API server
		NotAfter:              now.Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return cert, key, nil
}

func newServingCert(now time.Time, validity time.Duration, hosts []string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate serving key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("create serving certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode serving key: %w", err)
	}
	return pemBlock("CERTIFICATE", der), pemBlock("EC PRIVATE KEY", keyDER), nil
}

func unexpired(certs []*x509.Certificate, now time.Time) []*x509.Certificate {
	var out []*x509.Certificate
	for _, c := range certs {
		if now.Before(c.NotAfter) {
			out = append(out, c)
		}
	}
	return out
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err)) // the OS has no entropy source: nothing to recover
	}
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func encodeCerts(certs []*x509.Certificate) []byte {
	var b bytes.Buffer
	for _, c := range certs {
		b.Write(pemBlock("CERTIFICATE", c.Raw))
	}
	return b.Bytes()
}

func decodeCerts(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return out
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil && block.Type == "CERTIFICATE" {
			out = append(out, c)
		}
	}
}

// writeFile replaces name in dir atomically, so the webhook server never reads half a file.
func writeFile(dir, name string, data []byte) error {
	tmp, err := os.CreateTemp(dir, "."+name+"-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // gone after the rename; cleans up on failure
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}
