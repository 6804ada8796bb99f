package servers

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// AdmissionClient is the configuration that makes kube-apiserver present a client certificate to
// admission webhooks, so a webhook can tell the API server from any other caller of its port.
type AdmissionClient struct {
	// ConfigFile is the AdmissionConfiguration (--admission-control-config-file).
	ConfigFile string
}

// WriteAdmissionClient writes into dir an AdmissionConfiguration with which the API server
// presents m's client certificate to the validating and mutating webhooks at hosts: "host:port"
// as in the webhook's URL, or "*" for every webhook.
func WriteAdmissionClient(dir string, m *MTLS, hosts ...string) (*AdmissionClient, error) {
	if len(hosts) == 0 {
		return nil, fmt.Errorf("admission client certificate: no webhook host given")
	}
	b64 := base64.StdEncoding.EncodeToString
	var users strings.Builder
	for _, h := range hosts {
		fmt.Fprintf(&users, "- name: %q\n  user:\n    client-certificate-data: %s\n    client-key-data: %s\n", h, b64(m.ClientCertPEM), b64(m.ClientKeyPEM))
	}
	kubeconfigFile := filepath.Join(dir, "admission-webhooks.kubeconfig")
	kubeconfig := "apiVersion: v1\nkind: Config\nusers:\n" + users.String()
	var plugins strings.Builder
	for _, p := range []string{"ValidatingAdmissionWebhook", "MutatingAdmissionWebhook"} {
		fmt.Fprintf(&plugins, "- name: %s\n  configuration:\n    apiVersion: apiserver.config.k8s.io/v1\n    kind: WebhookAdmissionConfiguration\n    kubeConfigFile: %q\n", p, kubeconfigFile)
	}
	admission := "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n" + plugins.String()
	a := &AdmissionClient{ConfigFile: filepath.Join(dir, "admission.yaml")}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	for p, body := range map[string]string{a.ConfigFile: admission, kubeconfigFile: kubeconfig} {
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			return nil, fmt.Errorf("write the admission client configuration: %w", err)
		}
	}
	return a, nil
}

// Configure sets the API server flag that reads the AdmissionConfiguration.
func (a *AdmissionClient) Configure(env *envtest.Environment) {
	env.ControlPlane.GetAPIServer().Configure().Set("admission-control-config-file", a.ConfigFile)
}
