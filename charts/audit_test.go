package charts_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/kube"
	corev1 "k8s.io/api/core/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/mirror/audit"
	"github.com/siteops/siteops/internal/testenv"
)

// auditOn turns attribution on (the CommitRequest webhook then needs its client CA) with the
// audit overlay given.
func auditOn(audit string) string {
	return "flags: {author-attribution: true, redis-addr: \"redis:6379\", commitrequest-webhook-client-ca: /ca/ca.crt}\naudit: " + audit
}

// TestAuditReceiverService: with attribution on, the receiver's port is declared and a Service
// reaches it, a NodePort one when asked; with it off (the default) neither is rendered.
func TestAuditReceiverService(t *testing.T) {
	m := render(t, "siteops", namespace, values(t, "flags:\n  author-attribution: true\n  redis-addr: redis:6379\n  commitrequest-webhook-client-ca: /ca/ca.crt\n  audit-listen-address: \":9555\"\n"))
	d := m.deployment(t)
	if p := containerPort(d, "audit"); p != 9555 {
		t.Fatalf("audit container port = %d, want 9555 from --audit-listen-address", p)
	}
	var svc corev1.Service
	if !m.get(t, "Service", "siteops-audit", &svc) || !selects(svc.Spec.Selector, d.Spec.Template.Labels) || svc.Spec.Ports[0].TargetPort.String() != "audit" {
		t.Fatalf("audit Service missing or not reaching the manager's audit port: %+v", svc.Spec)
	}
	if svc.Spec.Type != corev1.ServiceTypeClusterIP || svc.Spec.Ports[0].NodePort != 0 {
		t.Errorf("audit Service is %s with node port %d by default, want ClusterIP", svc.Spec.Type, svc.Spec.Ports[0].NodePort)
	}
	off := render(t, "siteops", namespace, values(t, "{}"))
	if off.get(t, "Service", "siteops-audit", nil) || containerPort(off.deployment(t), "audit") != -1 {
		t.Error("attribution is off by default, yet the audit Service or port is rendered")
	}

	np := render(t, "siteops", namespace, values(t, auditOn("{service: {type: NodePort, nodePort: 30444}}")))
	svc = corev1.Service{}
	if !np.get(t, "Service", "siteops-audit", &svc) || svc.Spec.Type != corev1.ServiceTypeNodePort || svc.Spec.Ports[0].NodePort != 30444 {
		t.Errorf("audit.service NodePort 30444 rendered as %+v", svc.Spec)
	}
}

// secretData is the data of the rendered Secret name.
func secretData(t *testing.T, m manifests, name string) map[string][]byte {
	t.Helper()
	var s corev1.Secret
	if !m.get(t, "Secret", name, &s) {
		t.Fatalf("no Secret %s rendered", name)
	}
	return s.Data
}

func parseCert(t *testing.T, pemBytes []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(pemBytes)
	if b == nil {
		t.Fatalf("no PEM block in %q", pemBytes)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAuditSelfSignedCertificates renders audit.certificates "self-signed" and runs the real
// audit receiver with the serving Secret as the pod mounts it and the flags the chart passes:
// the API server's client certificate from the client Secret, trusting its ca.crt, delivers
// events over mutual TLS; a client certificate of another release's CA is refused.
func TestAuditSelfSignedCertificates(t *testing.T) {
	m := render(t, "siteops", namespace, values(t, auditOn("{certificates: self-signed, ipAddresses: [127.0.0.1], dnsNames: [audit.example.test]}")))
	d := m.deployment(t)
	_, o := parseArgs(t, d)
	attr := o.Mirror.Attribution
	if attr.CertDir != "/etc/siteops/audit" || attr.ClientCAFile != "/etc/siteops/audit/ca.crt" {
		t.Fatalf("--audit-cert-dir=%q --audit-client-ca=%q, want the mounted serving Secret", attr.CertDir, attr.ClientCAFile)
	}
	vol := volumeAt(d, attr.CertDir)
	if vol == nil || vol.Secret == nil || vol.Secret.SecretName != "siteops-audit-serving" {
		t.Fatalf("the volume at %s is %+v, want Secret siteops-audit-serving", attr.CertDir, vol)
	}
	serving := secretData(t, m, "siteops-audit-serving")
	if _, ok := serving["tls.key"]; !ok {
		t.Fatal("the serving Secret has no tls.key")
	}
	ca := secretData(t, m, "siteops-audit-ca")
	if _, mounted := serving["ca.key"]; mounted || !bytes.Equal(serving["ca.crt"], ca["tls.crt"]) {
		t.Error("the serving Secret must hold the CA's certificate as ca.crt and never its key")
	}
	cert := parseCert(t, serving["tls.crt"])
	for _, name := range []string{"siteops-audit.siteops-system.svc", "siteops-audit.siteops-system.svc.cluster.local", "audit.example.test"} {
		if err := cert.VerifyHostname(name); err != nil {
			t.Errorf("serving certificate: %v", err)
		}
	}
	client := secretData(t, m, "siteops-audit-client")
	if cn := parseCert(t, client["tls.crt"]).Subject.CommonName; !slices.Contains(attr.ClientNames, cn) {
		t.Errorf("client certificate CN %q is not among --audit-client-names %q", cn, attr.ClientNames)
	}

	// The pod's view: the Secret's keys as files in the mounted folder.
	dir := t.TempDir()
	for k, v := range serving {
		if err := os.WriteFile(filepath.Join(dir, k), v, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rec := &countingRecorder{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r, err := audit.NewReceiver(audit.Config{CertDir: dir, ClientCAFile: filepath.Join(dir, "ca.crt"), ClientNames: attr.ClientNames,
		Handler: &audit.Handler{Recorder: rec}, Listener: l})
	if err != nil {
		t.Fatalf("the receiver refuses the chart's certificates: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	url := "https://" + l.Addr().String() + audit.PathPrefix + "default"
	if err := postAudit(url, client); err != nil {
		t.Fatalf("the API server's client certificate was refused: %v", err)
	}
	if rec.facts() != 1 {
		t.Fatalf("%d facts recorded, want 1", rec.facts())
	}
	other := render(t, "siteops", namespace, values(t, auditOn("{certificates: self-signed, ipAddresses: [127.0.0.1]}")))
	foreign := secretData(t, other, "siteops-audit-client")
	foreign["ca.crt"] = client["ca.crt"]
	if err := postAudit(url, foreign); err == nil {
		t.Error("a client certificate of another CA was accepted")
	}
}

// postAudit posts one audit event as the API server would, with the client Secret's
// certificate, trusting its ca.crt.
func postAudit(url string, client map[string][]byte) error {
	pair, err := tls.X509KeyPair(client["tls.crt"], client["tls.key"])
	if err != nil {
		return err
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(client["ca.crt"])
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}}}
	body := `{"kind":"EventList","apiVersion":"audit.k8s.io/v1","items":[{"level":"Metadata","auditID":"a1","stage":"ResponseComplete",` +
		`"verb":"update","requestURI":"/api/v1/namespaces/ns/configmaps/c","user":{"username":"alice"},` +
		`"objectRef":{"resource":"configmaps","namespace":"ns","name":"c","apiVersion":"v1"},"responseStatus":{"code":200}}]}`
	resp, err := hc.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}

// countingRecorder counts the facts the receiver hands it.
type countingRecorder struct {
	mu sync.Mutex
	n  int
}

func (c *countingRecorder) facts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *countingRecorder) RecordFact(context.Context, string, auditv1.Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return nil
}

func (c *countingRecorder) RecordDeleteCollectionFacts(context.Context, string, auditv1.Event) error {
	return nil
}

func (c *countingRecorder) Announce(context.Context, string, []auditv1.Event) error { return nil }

// TestAuditCertManagerCertificates renders audit.certificates "cert-manager": a CA of the
// release's own signs a serving certificate for the Service's names and a client certificate
// named as the receiver accepts; an issuerRef replaces that CA for both.
func TestAuditCertManagerCertificates(t *testing.T) {
	m := render(t, "siteops", namespace, values(t, auditOn("{certificates: cert-manager, ipAddresses: [10.0.0.5]}")))
	d := m.deployment(t)
	_, o := parseArgs(t, d)
	if o.Mirror.Attribution.CertDir != "/etc/siteops/audit" || o.Mirror.Attribution.ClientCAFile != "/etc/siteops/audit/ca.crt" {
		t.Errorf("flags name %q and %q, want the mounted serving Secret", o.Mirror.Attribution.CertDir, o.Mirror.Attribution.ClientCAFile)
	}
	if vol := volumeAt(d, "/etc/siteops/audit"); vol == nil || vol.Secret == nil || vol.Secret.SecretName != "siteops-audit-serving" {
		t.Errorf("the volume at /etc/siteops/audit is %+v, want Secret siteops-audit-serving", vol)
	}
	type certificate struct {
		Spec struct {
			SecretName, CommonName string
			IsCA                   bool
			DNSNames, IPAddresses  []string
			Usages                 []string
			IssuerRef              struct{ Kind, Name string }
		}
	}
	var ca, serving, client certificate
	if !m.get(t, "Certificate", "siteops-audit-ca", &ca) || !ca.Spec.IsCA || ca.Spec.IssuerRef.Name != "siteops-audit-selfsigned" {
		t.Errorf("CA Certificate: %+v", ca.Spec)
	}
	if !m.get(t, "Issuer", "siteops-audit-ca", nil) || !m.get(t, "Issuer", "siteops-audit-selfsigned", nil) {
		t.Error("the release's audit CA Issuers are not rendered")
	}
	if !m.get(t, "Certificate", "siteops-audit-serving", &serving) || serving.Spec.SecretName != "siteops-audit-serving" ||
		!slices.Contains(serving.Spec.DNSNames, "siteops-audit.siteops-system.svc") || !slices.Equal(serving.Spec.IPAddresses, []string{"10.0.0.5"}) ||
		!slices.Contains(serving.Spec.Usages, "server auth") || serving.Spec.IssuerRef.Name != "siteops-audit-ca" {
		t.Errorf("serving Certificate: %+v", serving.Spec)
	}
	if !m.get(t, "Certificate", "siteops-audit-client", &client) || client.Spec.CommonName != "kube-apiserver" ||
		!slices.Contains(client.Spec.Usages, "client auth") || client.Spec.IssuerRef.Name != "siteops-audit-ca" {
		t.Errorf("client Certificate: %+v", client.Spec)
	}

	// The client certificate takes the first name the receiver accepts, a comma list too.
	named := render(t, "siteops", namespace, values(t, "flags: {author-attribution: true, redis-addr: \"redis:6379\", commitrequest-webhook-client-ca: /ca/ca.crt, audit-client-names: \"apiserver-audit,kube-apiserver\"}\naudit: {certificates: cert-manager}"))
	client = certificate{}
	if !named.get(t, "Certificate", "siteops-audit-client", &client) || client.Spec.CommonName != "apiserver-audit" {
		t.Errorf("with --audit-client-names=apiserver-audit,kube-apiserver the client certificate is named %q", client.Spec.CommonName)
	}

	own := render(t, "siteops", namespace, values(t, auditOn("{certificates: cert-manager, certManager: {issuerRef: {kind: ClusterIssuer, name: corp-ca}}}")))
	if own.get(t, "Issuer", "siteops-audit-ca", nil) || own.get(t, "Certificate", "siteops-audit-ca", nil) {
		t.Error("with an issuerRef the chart still makes its own audit CA")
	}
	for _, name := range []string{"siteops-audit-serving", "siteops-audit-client"} {
		var c certificate
		if !own.get(t, "Certificate", name, &c) || c.Spec.IssuerRef.Kind != "ClusterIssuer" || c.Spec.IssuerRef.Name != "corp-ca" {
			t.Errorf("%s is not issued by the given issuerRef: %+v", name, c.Spec.IssuerRef)
		}
	}
	none := render(t, "siteops", namespace, values(t, auditOn("{}")))
	if none.get(t, "Certificate", "siteops-audit-serving", nil) || none.get(t, "Certificate", "siteops-audit-client", nil) || volumeAt(none.deployment(t), "/etc/siteops/audit") != nil {
		t.Error("audit.certificates empty, yet the chart makes or mounts audit certificates")
	}
}

// TestAuditCAKeptOnUpgrade renders the chart as an upgrade does, against a real API
// server holding the first install's Secrets: the CA stays, and both certificates are issued
// again from it, so the copy on the control plane stays trusted.
func TestAuditCAKeptOnUpgrade(t *testing.T) {
	c := testenv.APIServer(t)
	ns := c.Namespace(t, "audit-upgrade", nil)
	// Self-signed webhooks: the test API server serves no cert-manager kinds.
	vals := values(t, "flags: {author-attribution: true, redis-addr: \"redis:6379\", commitrequest-webhook-client-ca: /ca/ca.crt, webhook-self-signed: true}\naudit: {certificates: self-signed}")
	first := render(t, "siteops", ns, vals)
	ctx := context.Background()
	for _, name := range []string{"siteops-audit-ca", "siteops-audit-client"} {
		var s corev1.Secret
		if !first.get(t, "Secret", name, &s) {
			t.Fatalf("no Secret %s", name)
		}
		// Owned by the release, as the first install left it.
		s.Annotations = map[string]string{"meta.helm.sh/release-name": "siteops", "meta.helm.sh/release-namespace": ns}
		if err := c.Client.Create(ctx, &s); err != nil {
			t.Fatal(err)
		}
	}

	cfg := &action.Configuration{}
	flags := kube.GetConfig(c.KubeConfigFile(t, t.TempDir()), "", ns)
	cacheDir := t.TempDir()
	flags.CacheDir = &cacheDir
	if err := cfg.Init(flags, ns, "secret", func(string, ...any) {}); err != nil {
		t.Fatal(err)
	}
	upgrade := action.NewInstall(cfg)
	upgrade.DryRun, upgrade.DryRunOption = true, "server" // lookups read the cluster
	upgrade.ReleaseName, upgrade.Namespace, upgrade.DisableHooks = "siteops", ns, true
	rel, err := upgrade.Run(loadChart(t), vals)
	if err != nil {
		t.Fatalf("helm install --dry-run=server: %v", err)
	}
	objs, err := decodeAll(rel.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	again := manifests{objs: objs}
	var kept corev1.Secret
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "siteops-audit-ca"}, &kept); err != nil {
		t.Fatal(err)
	}
	if ca := secretData(t, again, "siteops-audit-ca"); !bytes.Equal(ca["tls.crt"], kept.Data["tls.crt"]) || !bytes.Equal(ca["tls.key"], kept.Data["tls.key"]) {
		t.Fatal("the upgrade made a new audit CA: the API server's copy of the old one would no longer trust the receiver")
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(kept.Data["tls.crt"])
	serving := parseCert(t, secretData(t, again, "siteops-audit-serving")["tls.crt"])
	if _, err := serving.Verify(x509.VerifyOptions{Roots: roots, DNSName: "siteops-audit." + ns + ".svc"}); err != nil {
		t.Errorf("the upgrade's serving certificate does not chain to the kept CA: %v", err)
	}
	var oldClient corev1.Secret
	if err := c.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "siteops-audit-client"}, &oldClient); err != nil {
		t.Fatal(err)
	}
	if _, err := parseCert(t, oldClient.Data["tls.crt"]).Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the first install's client certificate is no longer trusted after the upgrade: %v", err)
	}
}

// TestAuditNotesNameTheClientSecret: with the chart making the audit certificates, helm install
// says which Secret to copy to the control plane and where the API server posts.
func TestAuditNotesNameTheClientSecret(t *testing.T) {
	rel, err := newInstall("siteops", namespace).Run(loadChart(t), values(t, auditOn("{certificates: self-signed, service: {type: NodePort}}")))
	if err != nil {
		t.Fatal(err)
	}
	if n := rel.Info.Notes; !strings.Contains(n, "Secret siteops-audit-client") || !strings.Contains(n, "Service siteops-audit (a NodePort)") {
		t.Errorf("notes do not say which Secret to copy and where to post:\n%s", n)
	}
	rel, err = newInstall("siteops", namespace).Run(loadChart(t), values(t, auditOn("{}")))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(rel.Info.Notes, "audit-client") {
		t.Errorf("notes name a client Secret the chart does not make:\n%s", rel.Info.Notes)
	}
}
