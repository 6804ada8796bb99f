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
	if err := mkdir(filepath.Join(dir, "storage")); err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	storage, health, metrics := ports[0], ports[1], ports[2]
	p, err := startFluxController(ctx, "source-controller", dir, kubeconfig, storage, health, []string{
		"--storage-path=" + filepath.Join(dir, "storage"),
		"--storage-addr=" + storage,
		"--storage-adv-addr=" + storage,
		"--metrics-addr=" + metrics,
		"--health-addr=" + health,
		"--enable-leader-election=false",
	})
	if err != nil {
		return nil, err
	}
	return &FluxSource{Process: p, StorageURL: "http://" + storage}, nil
}

// freePorts is n free loopback addresses (host:port).
func freePorts(n int) ([]string, error) {
	out := make([]string, n)
	for i := range out {
		port, err := FreePort("127.0.0.1")
		if err != nil {
			return nil, err
		}
		out[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	return out, nil
}

// startFluxController runs the Flux controller binary name against the API server of
// kubeconfig (it takes it from KUBECONFIG), watching every namespace, with its files and logs
// under dir; it is ready once its /readyz on health answers 200 and addr takes connections.
func startFluxController(ctx context.Context, name, dir string, kubeconfig []byte, addr, health string, args []string) (*Process, error) {
	bin, err := LookBinary(name)
	if err != nil {
		return nil, err
	}
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, kubeconfig, 0o600); err != nil {
		return nil, fmt.Errorf("write %s's kubeconfig: %w", name, err)
	}
	p := newProcess(name, addr, dir, bin, append(args, "--watch-all-namespaces=true", "--log-level=info")...)
	// It names its own namespace in what it records.
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
		return waitTCP(ctx, addr)
	}
	if err := p.start(ctx, 60*time.Second, ready); err != nil {
		return nil, err
	}
	return p, nil
}
