package webhookcert_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
	"github.com/siteops/siteops/internal/webhookcert"
)

func TestMain(m *testing.M) { testenv.Main(m, servers.APIServerOptions{}) }

func leaf(t *testing.T, dir string) *x509.Certificate {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, webhookcert.CertFile), filepath.Join(dir, webhookcert.KeyFile))
	if err != nil {
		t.Fatalf("load serving pair: %v", err)
	}
	c, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func pool(t *testing.T, bundle []byte) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(bundle) {
		t.Fatal("caBundle holds no certificate")
	}
	return p
}

func countCerts(bundle []byte) int {
	n := 0
	for {
		var b *pem.Block
		b, bundle = pem.Decode(bundle)
		if b == nil {
			return n
		}
		n++
	}
}

// TestGeneratedCertificateServesAdmissionOverTLS generates the certificates, lets the rotator
// patch a real webhook configuration's caBundle, and has the API server call a webhook server
// using them: the request is denied by the handler only if TLS with the generated CA worked.
func TestGeneratedCertificateServesAdmissionOverTLS(t *testing.T) {
	c := testenv.APIServer(t)
	ctx := context.Background()
	dir := t.TempDir()
	port, err := servers.FreePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	name := testenv.Name(t)

	// The configuration exists before the certificates, with no caBundle, as after `kubectl apply`.
	url := "https://127.0.0.1:" + strconv.Itoa(port) + "/deny"
	fail, none := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "deny.webhookcert.test",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url},
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             &none,
			FailurePolicy:           &fail,
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"webhookcert-test": name}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
		}},
	}
	if err := c.Client.Create(ctx, vwc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), vwc) })

	r, err := webhookcert.New(c.Client, webhookcert.Options{CertDir: dir, Hosts: []string{"127.0.0.1", "localhost"}, ValidatingWebhooks: []string{name, "not-installed"}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Ensure(ctx)
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if !res.CARenewed || !res.CertRenewed {
		t.Errorf("first Ensure = %+v, want both generated", res)
	}
	for _, f := range []string{webhookcert.CertFile, webhookcert.KeyFile, webhookcert.CAFile, webhookcert.CAKeyFile} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", f, st.Mode().Perm())
		}
	}
	got := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := c.Client.Get(ctx, client.ObjectKeyFromObject(vwc), got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Webhooks[0].ClientConfig.CABundle, res.CABundle) {
		t.Fatal("caBundle not patched")
	}
	if _, err := leaf(t, dir).Verify(x509.VerifyOptions{Roots: pool(t, res.CABundle), DNSName: "localhost"}); err != nil {
		t.Errorf("serving certificate does not verify against the caBundle: %v", err)
	}

	var calls atomic.Int32
	srv := webhook.NewServer(webhook.Options{Host: "127.0.0.1", Port: port, CertDir: dir})
	srv.Register("/deny", &webhook.Admission{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		calls.Add(1)
		return admission.Denied("denied by the test webhook")
	})})
	sctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go func() { _ = srv.Start(sctx) }()
	testenv.Eventually(t, 10*time.Second, func() error { return srv.StartedChecker()(&http.Request{}) })

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "default", Labels: map[string]string{"webhookcert-test": name}}}
	err = c.Client.Create(ctx, cm)
	if err == nil || !strings.Contains(err.Error(), "denied by the test webhook") {
		t.Fatalf("create = %v, want the webhook's denial (a TLS failure reads differently)", err)
	}
	if calls.Load() != 1 {
		t.Errorf("webhook called %d times, want 1", calls.Load())
	}

	// Running again changes nothing.
	res2, err := r.Ensure(ctx)
	if err != nil || res2.CARenewed || res2.CertRenewed || !bytes.Equal(res2.CABundle, res.CABundle) {
		t.Errorf("second Ensure = %+v, %v: want nothing renewed", res2, err)
	}
}

// TestRenewal moves the clock: the serving certificate is renewed before it expires under the
// same CA; the CA is renewed before a new serving certificate would outlive it, and the old CA
// stays in the caBundle.
func TestRenewal(t *testing.T) {
	c := testenv.APIServer(t)
	ctx := context.Background()
	dir := t.TempDir()
	name := testenv.Name(t)
	url := "https://127.0.0.1:1/unused"
	none := admissionregistrationv1.SideEffectClassNone
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "a.webhookcert.test", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url},
			AdmissionReviewVersions: []string{"v1"}, SideEffects: &none,
			ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"never": name}},
		}},
	}
	if err := c.Client.Create(ctx, mwc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Client.Delete(context.Background(), mwc) })

	now := time.Now()
	clock := func() time.Time { return now }
	const day = 24 * time.Hour
	r, err := webhookcert.New(c.Client, webhookcert.Options{
		CertDir: dir, Hosts: []string{"siteops-webhook-service.siteops-system.svc"}, MutatingWebhooks: []string{name},
		CAValidity: 365 * day, CertValidity: 90 * day, RenewBefore: 30 * day, Now: clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	first, err := r.Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	serial := leaf(t, dir).SerialNumber

	now = now.Add(59 * day) // 31 days left: still fine
	if res, err := r.Ensure(ctx); err != nil || res.CertRenewed || res.CARenewed {
		t.Fatalf("Ensure with 31 days left = %+v, %v: want no renewal", res, err)
	}
	now = now.Add(2 * day) // 29 days left: renew the serving certificate only
	res, err := r.Ensure(ctx)
	if err != nil || !res.CertRenewed || res.CARenewed {
		t.Fatalf("Ensure with 29 days left = %+v, %v: want the serving certificate renewed", res, err)
	}
	l := leaf(t, dir)
	if l.SerialNumber.Cmp(serial) == 0 || !l.NotAfter.After(now.Add(89*day)) {
		t.Errorf("serving certificate not replaced: serial %v, notAfter %v", l.SerialNumber, l.NotAfter)
	}
	if !bytes.Equal(res.CABundle, first.CABundle) {
		t.Error("CA changed on a serving certificate renewal")
	}

	now = time.Now().Add(300 * day) // a 90-day certificate would outlive the 365-day CA
	res, err = r.Ensure(ctx)
	if err != nil || !res.CARenewed || !res.CertRenewed {
		t.Fatalf("Ensure near CA expiry = %+v, %v: want CA and certificate renewed", res, err)
	}
	if n := countCerts(res.CABundle); n != 2 {
		t.Errorf("caBundle holds %d CAs, want new and old", n)
	}
	if !bytes.Contains(res.CABundle, bytes.TrimSpace(first.CABundle)) {
		t.Error("old CA dropped from the caBundle while still valid")
	}
	if _, err := leaf(t, dir).Verify(x509.VerifyOptions{Roots: pool(t, res.CABundle), CurrentTime: now, DNSName: "siteops-webhook-service.siteops-system.svc"}); err != nil {
		t.Errorf("renewed serving certificate does not verify: %v", err)
	}
	got := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := c.Client.Get(ctx, client.ObjectKeyFromObject(mwc), got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Webhooks[0].ClientConfig.CABundle, res.CABundle) {
		t.Error("caBundle not patched after the CA renewal")
	}

	now = time.Now().Add(400 * day) // the old CA has expired: it leaves the bundle
	res, err = r.Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := countCerts(res.CABundle); n != 1 {
		t.Errorf("caBundle holds %d CAs after the old one expired, want 1", n)
	}
}

// TestBrokenFilesAreReplaced: unreadable or foreign files in the cert folder are regenerated,
// and a certificate for other hosts is reissued.
func TestBrokenFilesAreReplaced(t *testing.T) {
	c := testenv.APIServer(t)
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, webhookcert.CertFile), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := webhookcert.New(c.Client, webhookcert.Options{CertDir: dir, Hosts: []string{"a.svc"}})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := r.Ensure(ctx); err != nil || !res.CertRenewed {
		t.Fatalf("Ensure over garbage = %+v, %v", res, err)
	}
	r2, _ := webhookcert.New(c.Client, webhookcert.Options{CertDir: dir, Hosts: []string{"a.svc", "b.svc"}})
	res, err := r2.Ensure(ctx)
	if err != nil || res.CARenewed || !res.CertRenewed {
		t.Fatalf("Ensure with a new host = %+v, %v: want a new certificate under the same CA", res, err)
	}
	if err := leaf(t, dir).VerifyHostname("b.svc"); err != nil {
		t.Error(err)
	}
}

func TestOptionsValidated(t *testing.T) {
	if _, err := webhookcert.New(nil, webhookcert.Options{Hosts: []string{"a"}}); err == nil {
		t.Error("empty CertDir accepted")
	}
	if _, err := webhookcert.New(nil, webhookcert.Options{CertDir: "x"}); err == nil {
		t.Error("no hosts accepted")
	}
	if _, err := webhookcert.New(nil, webhookcert.Options{CertDir: "x", Hosts: []string{"a"}, CertValidity: time.Hour, RenewBefore: 2 * time.Hour}); err == nil {
		t.Error("RenewBefore >= CertValidity accepted")
	}
}

// TestReplicasShareTheCASecret: replicas starting at the same time agree on one CA through the
// Secret, so the caBundle they patch is the same and each one's certificate verifies with it.
func TestReplicasShareTheCASecret(t *testing.T) {
	c := testenv.APIServer(t)
	ctx := context.Background()
	ns := c.Namespace(t, "webhookcert", nil)
	secret := types.NamespacedName{Namespace: ns, Name: "siteops-webhook-ca"}
	const replicas = 3
	dirs := make([]string, replicas)
	results := make([]webhookcert.Result, replicas)
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		dirs[i] = t.TempDir()
		r, err := webhookcert.New(c.Client, webhookcert.Options{CertDir: dirs[i], Hosts: []string{"svc.test"}, CASecret: secret})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = r.Ensure(ctx)
		}()
	}
	wg.Wait()
	for i := range replicas {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		if !bytes.Equal(results[i].CABundle, results[0].CABundle) {
			t.Errorf("replica %d trusts a different CA", i)
		}
		if _, err := leaf(t, dirs[i]).Verify(x509.VerifyOptions{Roots: pool(t, results[0].CABundle), DNSName: "svc.test"}); err != nil {
			t.Errorf("replica %d certificate: %v", i, err)
		}
	}
	s := &corev1.Secret{}
	if err := c.Client.Get(ctx, secret, s); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(s.Data[webhookcert.CAFile], results[0].CABundle) {
		t.Error("Secret does not hold the shared CA")
	}
}
