package config_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/siteops/siteops/internal/decofile/inject"
	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/mirror/commitrequest"
	"github.com/siteops/siteops/internal/testenv"
)

// built is one kustomize build, looked up by kind and name.
type built []*resource.Resource

func (b built) get(t *testing.T, kind, name string, into any) bool {
	t.Helper()
	for _, r := range b {
		if r.GetKind() == kind && r.GetName() == name {
			if into != nil {
				j, err := r.MarshalJSON()
				if err == nil {
					err = json.Unmarshal(j, into)
				}
				if err != nil {
					t.Fatalf("%s %s: %v", kind, name, err)
				}
			}
			return true
		}
	}
	return false
}

// managerOf returns the manager Deployment and its parsed flags.
func managerOf(t *testing.T, b built) (*appsv1.Deployment, *manager.Options) {
	t.Helper()
	var d appsv1.Deployment
	if !b.get(t, "Deployment", "siteops-manager", &d) {
		t.Fatal("no Deployment siteops-manager")
	}
	o := manager.DefaultOptions()
	fs := pflag.NewFlagSet("siteops-manager", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.BindFlags(fs)
	if err := fs.Parse(d.Spec.Template.Spec.Containers[0].Args); err != nil {
		t.Fatalf("the manager rejects its args %q: %v", d.Spec.Template.Spec.Containers[0].Args, err)
	}
	return &d, &o
}

// TestWebhookWiring checks, for both install overlays, that the webhook configurations reach
// the manager: the Service they name exists, selects the manager's pods and targets the port the
// webhook server listens on, and the TLS wiring (cert-manager or self-signed) lines up.
func TestWebhookWiring(t *testing.T) {
	for _, dir := range []string{"default", "certmanager", "selfsigned"} {
		t.Run(dir, func(t *testing.T) {
			b := built(build(t, dir))
			d, o := managerOf(t, b)
			var mwc admissionregistrationv1.MutatingWebhookConfiguration
			var vwc admissionregistrationv1.ValidatingWebhookConfiguration
			if !b.get(t, "MutatingWebhookConfiguration", inject.MutatingConfigName, &mwc) ||
				!b.get(t, "ValidatingWebhookConfiguration", inject.ValidatingConfigName, &vwc) {
				t.Fatalf("want webhook configurations named %s and %s (the names the manager patches)", inject.MutatingConfigName, inject.ValidatingConfigName)
			}
			var crwc admissionregistrationv1.ValidatingWebhookConfiguration
			if !b.get(t, "ValidatingWebhookConfiguration", commitrequest.WebhookConfigName, &crwc) {
				t.Fatalf("want the CommitRequest webhook configuration named %s (the name the manager patches)", commitrequest.WebhookConfigName)
			}
			if p := crwc.Webhooks[0].ClientConfig.Service; p == nil || p.Path == nil || *p.Path != commitrequest.WebhookPath {
				t.Errorf("CommitRequest webhook clientConfig %+v: want path %s", p, commitrequest.WebhookPath)
			}
			refs := []*admissionregistrationv1.ServiceReference{mwc.Webhooks[0].ClientConfig.Service, vwc.Webhooks[0].ClientConfig.Service, crwc.Webhooks[0].ClientConfig.Service}
			var svc corev1.Service
			for _, ref := range refs {
				if ref == nil || ref.Namespace != "siteops-system" || !b.get(t, "Service", ref.Name, &svc) {
					t.Fatalf("webhook clientConfig %+v names no Service of the build", ref)
				}
			}
			if len(svc.Spec.Selector) == 0 {
				t.Fatal("the webhook Service has no selector")
			}
			for k, v := range svc.Spec.Selector {
				if d.Spec.Template.Labels[k] != v {
					t.Errorf("webhook Service selector %v does not select the manager pods %v", svc.Spec.Selector, d.Spec.Template.Labels)
				}
			}
			target := svc.Spec.Ports[0].TargetPort
			port := target.IntVal
			for _, p := range d.Spec.Template.Spec.Containers[0].Ports {
				if target.StrVal != "" && p.Name == target.StrVal {
					port = p.ContainerPort
				}
			}
			if port != int32(o.WebhookPort) {
				t.Errorf("webhook Service targets %s (port %d), the webhook server listens on %d", target.String(), port, o.WebhookPort)
			}
			svcHost := svc.Name + "." + svc.Namespace + ".svc"
			cert := certVolume(d, o.WebhookCertDir)
			if cert == nil {
				t.Fatalf("nothing is mounted at --webhook-cert-dir %s", o.WebhookCertDir)
			}

			if dir == "selfsigned" {
				if !o.WebhookSelfSigned || !slices.Contains(o.WebhookCertHosts, svcHost) || cert.EmptyDir == nil {
					t.Errorf("self-signed: --webhook-self-signed=%v, hosts %v (want %s), cert volume %+v (want emptyDir)", o.WebhookSelfSigned, o.WebhookCertHosts, svcHost, cert)
				}
				if ns, _, _ := strings.Cut(o.WebhookCASecret, "/"); ns != "siteops-system" {
					t.Errorf("--webhook-ca-secret %q: want a Secret in siteops-system shared by the replicas", o.WebhookCASecret)
				}
				return
			}
			// cert-manager: both configurations ask the CA injector for the same Certificate,
			// which covers the Service, comes from an Issuer of the build and writes the Secret
			// the manager mounts.
			from := mwc.Annotations["cert-manager.io/inject-ca-from"]
			if crwc.Annotations["cert-manager.io/inject-ca-from"] != from {
				t.Errorf("the CommitRequest webhook's inject-ca-from %q differs from %q", crwc.Annotations["cert-manager.io/inject-ca-from"], from)
			}
			if from == "" || vwc.Annotations["cert-manager.io/inject-ca-from"] != from {
				t.Fatalf("inject-ca-from %q / %q: want both set to the serving Certificate", from, vwc.Annotations["cert-manager.io/inject-ca-from"])
			}
			ns, name, _ := strings.Cut(from, "/")
			var c struct {
				Metadata struct{ Namespace string }
				Spec     struct {
					DNSNames   []string `json:"dnsNames"`
					SecretName string   `json:"secretName"`
					IssuerRef  struct{ Kind, Name string }
				}
			}
			if !b.get(t, "Certificate", name, &c) || c.Metadata.Namespace != ns {
				t.Fatalf("inject-ca-from %q names no Certificate of the build", from)
			}
			if !slices.Contains(c.Spec.DNSNames, svcHost) {
				t.Errorf("Certificate dnsNames %v miss %s", c.Spec.DNSNames, svcHost)
			}
			if !b.get(t, c.Spec.IssuerRef.Kind, c.Spec.IssuerRef.Name, nil) {
				t.Errorf("Certificate issuerRef %s %s is not in the build", c.Spec.IssuerRef.Kind, c.Spec.IssuerRef.Name)
			}
			if cert.Secret == nil || cert.Secret.SecretName != c.Spec.SecretName {
				t.Errorf("the manager mounts %+v at the cert dir, cert-manager writes Secret %s", cert, c.Spec.SecretName)
			}
		})
	}
}

func certVolume(d *appsv1.Deployment, dir string) *corev1.VolumeSource {
	for _, m := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
		if m.MountPath == dir {
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.Name == m.Name {
					return &v.VolumeSource
				}
			}
		}
	}
	return nil
}

// TestOverlaysAccepted sends what each overlay installs to a real API server (dry run; kinds it
// does not serve, like cert-manager's, are skipped) into a namespace of its own.
func TestOverlaysAccepted(t *testing.T) {
	c := testenv.APIServer(t)
	for _, dir := range []string{"default", "selfsigned"} {
		t.Run(dir, func(t *testing.T) {
			ns := c.Namespace(t, "config", nil)
			for _, r := range build(t, dir) {
				u, err := toUnstructured(r)
				if err != nil {
					t.Fatal(err)
				}
				gvk := u.GroupVersionKind()
				if _, err := c.Client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version); meta.IsNoMatchError(err) {
					continue
				}
				if gvk.Kind == "Namespace" || gvk.Kind == "CustomResourceDefinition" {
					continue // the namespace is the test's; the CRDs are installed already
				}
				if u.GetNamespace() != "" {
					u.SetNamespace(ns)
				}
				if err := c.Client.Create(context.Background(), u, client.DryRunAll); err != nil {
					t.Errorf("API server rejected %s: %v", fmt.Sprintf("%s %s", gvk.Kind, u.GetName()), err)
				}
			}
		})
	}
}

// TestEveryCRDInstalled fails when make manifests generated a CRD that crd/kustomization.yaml
// does not list (kustomize has no globs).
func TestEveryCRDInstalled(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("crd", "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no generated CRDs: %v", err)
	}
	var names []string
	for _, r := range build(t, "crd") {
		names = append(names, r.GetName())
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd struct{ Metadata struct{ Name string } }
		if err := yaml.Unmarshal(b, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !slices.Contains(names, crd.Metadata.Name) {
			t.Errorf("%s (%s) is not listed in config/crd/kustomization.yaml", f, crd.Metadata.Name)
		}
	}
}
