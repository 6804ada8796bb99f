package servers

import (
	"context"
	"path/filepath"
)

// FluxNotificationCRDs is the folder of Flux notification-controller's CRDs (Alert, Provider,
// Receiver) that `make test-tools` copies beside the binary.
func FluxNotificationCRDs() string { return filepath.Join(AssetsDir(), "flux-notification-crds") }

// FluxNotification is Flux's notification-controller: it takes events on EventsURL and
// forwards them to the Providers of the Alerts that select them.
type FluxNotification struct {
	*Process
	// EventsURL is its events endpoint on loopback (http://127.0.0.1:port/).
	EventsURL string
}

// StartFluxNotification runs notification-controller against the API server whose admin
// kubeconfig is kubeconfig, with its logs under dir. The API server must serve its CRDs
// (FluxNotificationCRDs).
func StartFluxNotification(ctx context.Context, kubeconfig []byte, dir string) (*FluxNotification, error) {
	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	events, health := ports[0], ports[1]
	p, err := startFluxController(ctx, "notification-controller", dir, kubeconfig, events, health, []string{
		"--events-addr=" + events,
		"--receiverAddr=" + ports[2],
		"--metrics-addr=" + ports[3],
		"--health-addr=" + health,
	})
	if err != nil {
		return nil, err
	}
	return &FluxNotification{Process: p, EventsURL: "http://" + events + "/"}, nil
}
