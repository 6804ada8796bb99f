package servers

import (
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/siteops/siteops/config/crd"
)

// APIServerOptions configures StartAPIServer.
type APIServerOptions struct {
	// ExtraCRDs are installed besides the siteops CRDs (e.g. Knative Service, Flux Kustomization).
	ExtraCRDs []*apiextensionsv1.CustomResourceDefinition
	// ExtraCRDPaths are files or folders of CRD manifests to install too.
	ExtraCRDPaths []string
	// Webhooks are admission webhook configurations to install, served by a local webhook server.
	Webhooks envtest.WebhookInstallOptions
	// Configure may adjust the environment before it starts (API server flags, users).
	Configure func(*envtest.Environment)
	// AuditLogPath, when set, makes the API server also write its audit events to this file
	// (JSON lines, --audit-log-path), synchronously; it needs an audit policy (see
	// AuditWebhook.Configure).
	AuditLogPath string
}

// APIServer is a running kube-apiserver with etcd and the siteops CRDs installed.
type APIServer struct {
	// Env is the controller-runtime test environment behind it.
	Env *envtest.Environment
	// Config is an admin REST config.
	Config *rest.Config
	// KubeConfig is an admin kubeconfig file's content.
	KubeConfig []byte
}

// StartAPIServer starts etcd and kube-apiserver from AssetsDir and installs the CRDs.
func StartAPIServer(o APIServerOptions) (*APIServer, error) {
	if _, err := LookBinary("kube-apiserver"); err != nil {
		return nil, err
	}
	crds, err := crd.CRDs()
	if err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: AssetsDir(),
		CRDInstallOptions: envtest.CRDInstallOptions{
			CRDs:               append(crds, o.ExtraCRDs...),
			Paths:              o.ExtraCRDPaths,
			ErrorIfPathMissing: true,
		},
		WebhookInstallOptions: o.Webhooks,
	}
	if o.Configure != nil {
		o.Configure(env)
	}
	if o.AuditLogPath != "" {
		args := env.ControlPlane.GetAPIServer().Configure()
		args.Set("audit-log-path", o.AuditLogPath)
		args.Set("audit-log-format", "json")
		args.Set("audit-log-mode", "blocking")
	}
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("start kube-apiserver and etcd from %s: %w", AssetsDir(), err)
	}
	return &APIServer{Env: env, Config: cfg, KubeConfig: env.KubeConfig}, nil
}

// Stop ends the API server and etcd.
func (a *APIServer) Stop() error { return a.Env.Stop() }
