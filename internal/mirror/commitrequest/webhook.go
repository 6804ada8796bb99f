// Package commitrequest implements the CommitRequest command: an admission webhook that records
// who submitted each request, and a controller that closes the target's open commit window and
// commits with the request's message, authored by that submitter.
//
// The webhook is validating (not mutating) because only validating admission sees the object's
// UID, which the API server assigns after mutation; the record is keyed by that UID. It always
// allows, has failurePolicy Ignore and is side-effect free on dry runs, so it can never block a
// request: without a record the commit is authored by the committer, and the request's
// AuthorAttributed condition says so.
package commitrequest

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/mirror/store"
)

// WebhookPath is where the admission webhook is served.
const WebhookPath = "/validate-mirror-siteops-dev-v1alpha1-commitrequest"

// WebhookConfigName is the ValidatingWebhookConfiguration's name.
const WebhookConfigName = "siteops-mirror-commitrequest"

// AuthorRecorder stores command authors (the store's CommandAuthorStore).
type AuthorRecorder interface {
	RecordCommandAuthor(ctx context.Context, uid types.UID, author store.CommandAuthor) error
}

// Recorder is the admission handler that records the submitter of each CommitRequest CREATE.
type Recorder struct {
	// Authors stores the records.
	Authors AuthorRecorder
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// Handle records the authenticated submitter under the new object's UID and always allows.
// Dry runs are allowed without recording anything (the webhook declares NoneOnDryRun).
func (r *Recorder) Handle(ctx context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create || req.Kind.Group != mirrorv1alpha1.GroupVersion.Group || req.Kind.Kind != "CommitRequest" {
		return admission.Allowed("")
	}
	if req.DryRun != nil && *req.DryRun {
		return admission.Allowed("dry run: submitter not recorded")
	}
	log := logf.FromContext(ctx).WithName("commitrequest-webhook").WithValues("namespace", req.Namespace, "name", req.Name)
	var obj metav1.PartialObjectMetadata
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil || obj.UID == "" {
		log.Info("CommitRequest without a UID at admission; its commit will be authored by the committer")
		return admission.Allowed("")
	}
	display, email := store.UserClaims(req.UserInfo)
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	author := store.CommandAuthor{
		Author:      req.UserInfo.Username,
		DisplayName: display,
		Email:       email,
		RequestedAt: now().UTC().Format(time.RFC3339Nano),
	}
	if err := r.Authors.RecordCommandAuthor(ctx, obj.UID, author); errors.Is(err, store.ErrCommandAuthorRecorded) {
		// The first record stands: a second, different submitter for one UID is not the API
		// server admitting a new object.
		log.Info("WARNING: a different submitter is already recorded for this CommitRequest; the first record stands", "offered", author.Author)
		return admission.Allowed("")
	} else if err != nil {
		// Best effort: never block the request; the controller falls back to the committer.
		log.Error(err, "record the CommitRequest submitter; its commit will be authored by the committer")
		return admission.Allowed("submitter not recorded: the commit will be authored by the committer")
	}
	return admission.Allowed("")
}

// ClientConfigFunc returns the client configuration for a webhook path.
type ClientConfigFunc func(path string) admissionregistrationv1.WebhookClientConfig

// URLClientConfig serves the webhook at base+path with caBundle (tests, `siteops dev up`).
func URLClientConfig(base string, caBundle []byte) ClientConfigFunc {
	return func(path string) admissionregistrationv1.WebhookClientConfig {
		u := base + path
		return admissionregistrationv1.WebhookClientConfig{URL: &u, CABundle: caBundle}
	}
}

// ServiceClientConfig serves the webhook through a Service (clusters).
func ServiceClientConfig(namespace, name string, port int32, caBundle []byte) ClientConfigFunc {
	return func(path string) admissionregistrationv1.WebhookClientConfig {
		p := path
		return admissionregistrationv1.WebhookClientConfig{
			Service:  &admissionregistrationv1.ServiceReference{Namespace: namespace, Name: name, Path: &p, Port: &port},
			CABundle: caBundle,
		}
	}
}

// WebhookConfiguration builds the ValidatingWebhookConfiguration for CommitRequest CREATEs:
// failurePolicy Ignore (a request never waits on the mirror), sideEffects NoneOnDryRun, a short
// timeout.
func WebhookConfiguration(cc ClientConfigFunc) *admissionregistrationv1.ValidatingWebhookConfiguration {
	ignore := admissionregistrationv1.Ignore
	noneOnDryRun := admissionregistrationv1.SideEffectClassNoneOnDryRun
	equivalent := admissionregistrationv1.Equivalent
	timeout := int32(5)
	namespaced := admissionregistrationv1.NamespacedScope
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: WebhookConfigName, Labels: map[string]string{"app.kubernetes.io/managed-by": "siteops"}},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "commitrequest.mirror.siteops.dev",
			AdmissionReviewVersions: []string{"v1"},
			ClientConfig:            cc(WebhookPath),
			FailurePolicy:           &ignore,
			SideEffects:             &noneOnDryRun,
			MatchPolicy:             &equivalent,
			TimeoutSeconds:          &timeout,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{
					APIGroups:   []string{mirrorv1alpha1.GroupVersion.Group},
					APIVersions: []string{mirrorv1alpha1.GroupVersion.Version},
					Resources:   []string{"commitrequests"},
					Scope:       &namespaced,
				},
			}},
		}},
	}
}

var _ admission.Handler = (*Recorder)(nil)
