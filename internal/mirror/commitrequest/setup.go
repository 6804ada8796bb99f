package commitrequest

import (
	"errors"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/siteops/siteops/internal/mirror/attribution"
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
}

// Setup registers the admission webhook (when Authors is set and the manager has a webhook
// server) and the controller.
func Setup(mgr ctrl.Manager, o Options) error {
	if o.Closer == nil {
		return errors.New("commitrequest: no window closer (mirror engine) configured")
	}
	r := &Reconciler{Client: mgr.GetClient(), Closer: o.Closer, Identity: o.Identity, RetryAfter: o.RetryAfter}
	if o.Authors != nil {
		r.Authors = o.Authors
		if srv := mgr.GetWebhookServer(); srv != nil {
			srv.Register(WebhookPath, &webhook.Admission{Handler: &Recorder{Authors: o.Authors}})
		}
	}
	return r.SetupWithManager(mgr)
}
