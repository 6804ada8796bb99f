package node

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/siteops/siteops/internal/servers"
)

// APIAccess is the client certificate the API server presents to kubelets, and the CA kubelets
// trust it with. Create it before the API server starts and pass Flags to it.
type APIAccess struct {
	// CAFile is the CA kubelets trust for their callers.
	CAFile string
	// CertFile and KeyFile are the API server's client certificate and key.
	CertFile, KeyFile string
}

// NewAPIAccess creates a CA and a client certificate in dir.
func NewAPIAccess(dir string) (*APIAccess, error) {
	m, err := servers.NewMTLS(dir, "kube-apiserver-kubelet-client")
	if err != nil {
		return nil, fmt.Errorf("kubelet client certificate: %w", err)
	}
	a := &APIAccess{CAFile: m.CAFile, CertFile: filepath.Join(dir, "kubelet-client.crt"), KeyFile: filepath.Join(dir, "kubelet-client.key")}
	if err := os.WriteFile(a.CertFile, m.ClientCertPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(a.KeyFile, m.ClientKeyPEM, 0o600); err != nil {
		return nil, err
	}
	return a, nil
}

// APIServerFlags are the kube-apiserver flags a node needs: Node addresses used as they are
// (not resolved through the machine's DNS); the `kubernetes` Service's endpoint left to the node
// (the API server's own address is the machine's loopback, which no pod reaches); webhook and
// aggregated API Services dialled at their endpoints (pod IPs the machine routes to the node)
// rather than at ClusterIPs only the node's namespace knows; and, with a, the client
// certificate for kubelets.
func APIServerFlags(a *APIAccess) map[string]string {
	f := map[string]string{
		"kubelet-preferred-address-types": "InternalIP",
		"endpoint-reconciler-type":        "none",
		"enable-aggregator-routing":       "true",
	}
	if a != nil {
		f["kubelet-client-certificate"] = a.CertFile
		f["kubelet-client-key"] = a.KeyFile
	}
	return f
}
