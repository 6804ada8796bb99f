package devenv

import (
	"fmt"
	"net"
	"strconv"

	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/servers"
)

// commitRequestWebhookServed reports whether the manager serves the mirror's CommitRequest
// webhook (dev up always gives the mirror its Redis).
func commitRequestWebhookServed(mo *manager.Options) bool {
	return mo.Enabled(manager.PartMirror) && mo.Mirror.CommitRequestWebhook
}

// commitRequestWebhookClient lets the CommitRequest webhook tell the API server from any other
// caller, as a cluster must (the manager refuses to serve it otherwise): a throw-away CA with the
// API server's admission client certificate, the AdmissionConfiguration with which the API
// server presents it, and the manager's --commitrequest-webhook-client-ca. The API server
// presents it to every webhook ("*"): the local one calls the manager's webhooks only, whose
// port is chosen after it starts. Nil when the webhook is not served.
func commitRequestWebhookClient(dir string, mo *manager.Options) (*servers.AdmissionClient, error) {
	if !commitRequestWebhookServed(mo) {
		return nil, nil
	}
	certs, err := servers.NewMTLS(dir, "kube-apiserver", "127.0.0.1")
	if err != nil {
		return nil, fmt.Errorf("create the API server's admission client certificate: %w", err)
	}
	mo.Mirror.CommitRequestWebhookClientCA = certs.CAFile
	mo.Mirror.CommitRequestWebhookClientNames = []string{"kube-apiserver"}
	return servers.WriteAdmissionClient(dir, certs, "*")
}

// WebhookAddr is host:port of the manager's admission webhook server.
func (e *Env) WebhookAddr() string {
	return net.JoinHostPort(e.manager.WebhookHost, strconv.Itoa(e.manager.WebhookPort))
}
