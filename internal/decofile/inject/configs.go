package inject

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// Names of the webhook configurations and the paths the webhook server serves. The manifests in
// config/webhook use the same names (a test keeps them in step).
const (
	// MutatingConfigName is the MutatingWebhookConfiguration of the injection webhook.
	MutatingConfigName = "siteops-decofile-inject"
	// ValidatingConfigName is the ValidatingWebhookConfiguration protecting referenced Decofiles.
	ValidatingConfigName = "siteops-decofile-protect"
	// MutatePath serves the injection webhook.
	MutatePath = "/mutate-decofile-inject"
	// ValidateDeletePath serves the Decofile delete protection.
	ValidateDeletePath = "/validate-decofile-delete"
	// MutatingWebhookName is the name of the webhook inside MutatingConfigName.
	MutatingWebhookName = "inject.decofile.deco.sites"
	// ValidatingWebhookName is the name of the webhook inside ValidatingConfigName.
	ValidatingWebhookName = "protect.decofile.deco.sites"
)

// MatchCondition is the CEL expression that limits the injection webhook to objects that ask
// for it, or that carry the label of an earlier injection (so removing the annotation strips
// the injection). The API server evaluates it, so other workloads never wait on this webhook
// and an operator outage cannot block them.
const MatchCondition = `(has(object.metadata.annotations) && ('` + decov1.AnnotationInject + `' in object.metadata.annotations || '` +
	decov1.AnnotationValkeyACLInject + `' in object.metadata.annotations)) || (has(object.metadata.labels) && '` +
	decov1.LabelDecofile + `' in object.metadata.labels)`

// ClientConfigFunc returns how the API server reaches the webhook served at path.
type ClientConfigFunc func(path string) admissionregistrationv1.WebhookClientConfig

// ServiceClientConfig reaches the webhook through a Service (in-cluster deployments).
func ServiceClientConfig(namespace, name string, port int32) ClientConfigFunc {
	return func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
			Namespace: namespace, Name: name, Path: &path, Port: &port,
		}}
	}
}

// URLClientConfig reaches the webhook at base (https://host:port) directly, as a local API server
// must when the manager runs outside the cluster.
func URLClientConfig(base string, caBundle []byte) ClientConfigFunc {
	return func(path string) admissionregistrationv1.WebhookClientConfig {
		u := base + path
		return admissionregistrationv1.WebhookClientConfig{URL: &u, CABundle: caBundle}
	}
}

// WebhookConfigurations builds the mutating and validating webhook configurations served by
// Setup. `siteops dev up` and the tests install them; config/webhook holds the same for clusters.
func WebhookConfigurations(cc ClientConfigFunc) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration) {
	fail := admissionregistrationv1.Fail
	ignore := admissionregistrationv1.Ignore
	none := admissionregistrationv1.SideEffectClassNone
	ifNeeded := admissionregistrationv1.IfNeededReinvocationPolicy
	equivalent := admissionregistrationv1.Equivalent
	timeout := int32(10)
	labels := map[string]string{decov1.LabelManagedBy: decov1.ManagedByValue}

	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: MutatingConfigName, Labels: labels},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    MutatingWebhookName,
			ClientConfig:            cc(MutatePath),
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             &none,
			// Fail: a site created while the operator is down must not start without its
			// configuration. matchConditions keep every other workload out of this path.
			FailurePolicy:      &fail,
			MatchPolicy:        &equivalent,
			ReinvocationPolicy: &ifNeeded,
			TimeoutSeconds:     &timeout,
			MatchConditions: []admissionregistrationv1.MatchCondition{{
				Name: "asks-for-injection", Expression: MatchCondition,
			}},
			Rules: []admissionregistrationv1.RuleWithOperations{
				rule("apps", "v1", "deployments", "statefulsets"),
				rule("serving.knative.dev", "v1", "services"),
			},
		}},
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{
		TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration"},
		ObjectMeta: metav1.ObjectMeta{Name: ValidatingConfigName, Labels: labels},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    ValidatingWebhookName,
			ClientConfig:            cc(ValidateDeletePath),
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             &none,
			// Ignore: the protection is a safety net; an operator outage must not make
			// Decofiles undeletable (e.g. while uninstalling).
			FailurePolicy:  &ignore,
			MatchPolicy:    &equivalent,
			TimeoutSeconds: &timeout,
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{decov1.GroupVersion.Group}, APIVersions: []string{decov1.GroupVersion.Version},
					Resources: []string{"decofiles"}, Scope: ptrScope(admissionregistrationv1.NamespacedScope),
				},
			}},
		}},
	}
	return mutating, validating
}

func rule(group, version string, resources ...string) admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule: admissionregistrationv1.Rule{
			APIGroups: []string{group}, APIVersions: []string{version}, Resources: resources,
			Scope: ptrScope(admissionregistrationv1.NamespacedScope),
		},
	}
}

func ptrScope(s admissionregistrationv1.ScopeType) *admissionregistrationv1.ScopeType { return &s }
