package ruleaccess

import (
	"fmt"

	"k8s.io/client-go/discovery"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// Setup serves the webhook on the manager's webhook server (every replica, not only the leader).
// A manager without a webhook server serves nothing.
func Setup(mgr ctrl.Manager) error {
	srv := mgr.GetWebhookServer()
	if srv == nil {
		return nil
	}
	dc, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("WatchRule access webhook: create discovery client: %w", err)
	}
	srv.Register(WebhookPath, &webhook.Admission{Handler: &Checker{Discovery: dc, Reviews: mgr.GetClient()}})
	return nil
}
