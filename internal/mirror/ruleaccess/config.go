package ruleaccess

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
)

// WebhookPath is where the admission webhook is served.
const WebhookPath = "/validate-mirror-siteops-dev-v1alpha1-watchrule"

// WebhookConfigName is the ValidatingWebhookConfiguration's name (config/webhook names it
// mirror-watchrule; config/default and the chart prefix it with siteops-).
const WebhookConfigName = "siteops-mirror-watchrule"

// WebhookName is the name of the webhook inside WebhookConfigName.
const WebhookName = "watchrule.mirror.siteops.dev"

// MatchCondition sends only creates and spec changes to the webhook: metadata and finalizer
// updates and deletions never wait on it, so an operator outage cannot block them.
const MatchCondition = `request.operation == 'CREATE' || object.spec != oldObject.spec`

// ClientConfigFunc returns the client configuration for a webhook path (the same shape as
// commitrequest.URLClientConfig and commitrequest.ServiceClientConfig return).
type ClientConfigFunc func(path string) admissionregistrationv1.WebhookClientConfig

// WebhookConfiguration builds the ValidatingWebhookConfiguration for WatchRule and
// ClusterWatchRule creates and updates. failurePolicy is Fail: the check is an authorization
// check, and a rule admitted while the webhook is unreachable would mirror unchecked.
func WebhookConfiguration(cc ClientConfigFunc) *admissionregistrationv1.ValidatingWebhookConfiguration {
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	equivalent := admissionregistrationv1.Equivalent
	timeout := int32(10)
	all := admissionregistrationv1.AllScopes
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: WebhookConfigName, Labels: map[string]string{"app.kubernetes.io/managed-by": "siteops"}},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    WebhookName,
			AdmissionReviewVersions: []string{"v1"},
			ClientConfig:            cc(WebhookPath),
			FailurePolicy:           &fail,
			SideEffects:             &none,
			MatchPolicy:             &equivalent,
			TimeoutSeconds:          &timeout,
			MatchConditions:         []admissionregistrationv1.MatchCondition{{Name: "creates-or-changes-the-selection", Expression: MatchCondition}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule: admissionregistrationv1.Rule{
					APIGroups:   []string{mirrorv1alpha1.GroupVersion.Group},
					APIVersions: []string{mirrorv1alpha1.GroupVersion.Version},
					Resources:   []string{"watchrules", "clusterwatchrules"},
					Scope:       &all,
				},
			}},
		}},
	}
}
