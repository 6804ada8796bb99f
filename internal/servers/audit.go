package servers

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// WriteAuditPolicy logs every write with its response (the mirror needs the UIDs and resource
// versions in it), and nothing for reads or for the lease and event churn.
const WriteAuditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: None
  resources:
  - group: coordination.k8s.io
    resources: ["leases"]
  - group: ""
    resources: ["events"]
  - group: events.k8s.io
    resources: ["events"]
- level: RequestResponse
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`

// AuditWebhook is the configuration that makes kube-apiserver post audit events to a receiver.
type AuditWebhook struct {
	// PolicyFile is the audit policy (--audit-policy-file).
	PolicyFile string
	// KubeconfigFile names the receiver and the client certificate (--audit-webhook-config-file).
	KubeconfigFile string
}

// WriteAuditWebhook writes policy and a webhook kubeconfig into dir: the API server posts to
// receiverURL, trusting m's CA and presenting m's client certificate.
func WriteAuditWebhook(dir, receiverURL string, m *MTLS, policy string) (*AuditWebhook, error) {
	b64 := base64.StdEncoding.EncodeToString
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: audit-receiver
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: kube-apiserver
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: default
  context: {cluster: audit-receiver, user: kube-apiserver}
current-context: default
`, receiverURL, b64(m.CAPEM), b64(m.ClientCertPEM), b64(m.ClientKeyPEM))
	a := &AuditWebhook{PolicyFile: filepath.Join(dir, "audit-policy.yaml"), KubeconfigFile: filepath.Join(dir, "audit-webhook.kubeconfig")}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	for p, body := range map[string]string{a.PolicyFile: policy, a.KubeconfigFile: kubeconfig} {
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			return nil, fmt.Errorf("write audit webhook configuration: %w", err)
		}
	}
	return a, nil
}

// Configure sets the API server flags that enable the audit webhook, batching for at most a second.
func (a *AuditWebhook) Configure(env *envtest.Environment) {
	args := env.ControlPlane.GetAPIServer().Configure()
	args.Set("audit-policy-file", a.PolicyFile)
	args.Set("audit-webhook-config-file", a.KubeconfigFile)
	args.Set("audit-webhook-batch-max-wait", "1s")
	args.Set("audit-webhook-initial-backoff", "200ms")
}
