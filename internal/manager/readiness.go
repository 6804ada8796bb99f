package manager

import (
	"net/http"
	"sync/atomic"

	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// webhookServer is the manager's webhook server; it remembers whether any part registered a
// webhook, so readiness waits for the server only on a replica that has webhooks to serve.
type webhookServer struct {
	webhook.Server
	registered atomic.Bool
}

// Register serves hook at path and marks the server as one readiness must wait for.
func (s *webhookServer) Register(path string, hook http.Handler) {
	s.registered.Store(true)
	s.Server.Register(path, hook)
}

// readyCheck passes once the webhook server accepts TLS connections, or at once when no part
// registered a webhook.
func (s *webhookServer) readyCheck(req *http.Request) error {
	if !s.registered.Load() {
		return nil
	}
	return s.StartedChecker()(req)
}
