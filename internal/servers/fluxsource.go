package servers

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// FluxSourceCRDs is the folder of Flux source-controller's CRDs that `make test-tools` copies
// beside the binary.
func FluxSourceCRDs() string { return filepath.Join(AssetsDir(), "flux-source-crds") }

// FluxSource is Flux's source-controller, reconciling GitRepository, OCIRepository and Bucket
// objects of an API server and serving their artifacts on loopback.
type FluxSource struct {
	*Process
	// StorageURL is where it serves artifacts (http://127.0.0.1:port), as its objects' status
	// URLs name it.
	StorageURL string
}

// StartFluxSource runs source-controller against the API server whose admin kubeconfig is
// kubeconfig, with its storage and logs under dir. The API server must serve its CRDs
// (FluxSourceCRDs).
func StartFluxSource(ctx context.Context, kubeconfig []byte, dir string) (*FluxSource, error) {
	bin, err := LookBinary("source-controller")
	if err != nil {
		return nil, err
	}
	if err := mkdir(filepath.Join(dir, "storage")); err != nil {
		return nil, err
	}
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, kubeconfig, 0o600); err != nil {
		return nil, fmt.Errorf("write source-controller's kubeconfig: %w", err)
	}
	ports := make([]int, 3)
	for i := range ports {
		if ports[i], err = FreePort("127.0.0.1"); err != nil {
			return nil, err
		}
	}
	storage := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	health := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
	p := newProcess("source-controller", storage, dir, bin,
		"--storage-path="+filepath.Join(dir, "storage"),
		"--storage-addr="+storage,
		"--storage-adv-addr="+storage,
		"--metrics-addr="+net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2])),
		"--health-addr="+health,
		"--enable-leader-election=false",
		"--watch-all-namespaces=true",
		"--log-level=info",
	)
	// It takes its API server from KUBECONFIG, and names its own namespace in what it records.
	p.env = []string{"KUBECONFIG=" + kc, "RUNTIME_NAMESPACE=flux-system"}
	ready := func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+health+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz answered %d", resp.StatusCode)
		}
		return waitTCP(ctx, storage)
	}
	if err := p.start(ctx, 60*time.Second, ready); err != nil {
		return nil, err
	}
	return &FluxSource{Process: p, StorageURL: "http://" + storage}, nil
}
