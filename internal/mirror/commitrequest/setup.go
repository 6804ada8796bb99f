package commitrequest

import (
	"errors"
	"net/http"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/siteops/siteops/internal/mirror/attribution"
	"github.com/siteops/siteops/internal/mirror/clientauth"
	"github.com/siteops/siteops/internal/shard"
)

// Options configures the CommitRequest webhook and controller.
type Options struct {
	// Authors records and reads submitters (the store's CommandAuthorStore); nil disables the
	// webhook and every command commit is authored by the committer.
	Authors interface {
		AuthorRecorder
		AuthorLookup
	}
	// Closer closes GitTarget windows (the mirror engine).
	Closer WindowCloser
	// Identity derives git identities from users.
	Identity attribution.Identity
	// RetryAfter is the wait before retrying a request whose target is not running.
	RetryAfter time.Duration
	// Clients limits the webhook to callers presenting an accepted client certificate (the API
	// server, configured with an AdmissionConfiguration kubeconfig); others get 403 and record
	// nothing. Nil accepts any caller that reaches the webhook port: the mirror part never
	// serves it so (--commitrequest-webhook-client-ca is required); tests of the handler may.
	Clients *clientauth.Verifier
	// Shard selects the requests this instance processes, by the labels TargetLabels returns
	// (their GitTarget's).
	Shard        shard.Selector
	TargetLabels shard.LabelsFunc
}

// Setup registers the admission webhook (when Authors is set and the manager has a webhook
// server) and the controller.
func Setup(mgr ctrl.Manager, o Options) error {
	if o.Closer == nil {
		return errors.New("commitrequest: no window closer (mirror engine) configured")
	}
	r := &Reconciler{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Closer: o.Closer, Identity: o.Identity, RetryAfter: o.RetryAfter,
		Shard: o.Shard, TargetLabels: o.TargetLabels}
	if o.Authors != nil {
		r.Authors = o.Authors
		if srv := mgr.GetWebhookServer(); srv != nil {
			var h http.Handler = &webhook.Admission{Handler: &Recorder{Authors: o.Authors}}
			if o.Clients != nil {
				// The webhook server is shared with other parts' webhooks: it asks every caller
				// for a certificate, and only this path requires an accepted one. A server of
				// another kind (the manager wraps its own) is built asking for them
				// (mirror.Options.WebhookTLSOpts); without, every caller gets 403.
				if ds, ok := srv.(*webhook.DefaultServer); ok {
					ds.Options.TLSOpts = append(ds.Options.TLSOpts, clientauth.RequestClientCert)
				}
				h = o.Clients.Middleware(h)
			}
			srv.Register(WebhookPath, h)
		}
	}
	return r.SetupWithManager(mgr)
}
