package inject

import (
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
)

// Options configures the injection webhooks.
type Options struct {
	// S3 tells pods where s3-target Decofiles are served; unset means S3 is not configured.
	S3 S3Config
}

// +kubebuilder:rbac:groups=deco.sites,resources=decofiles,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces;configmaps;secrets,verbs=get
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets,verbs=list
// +kubebuilder:rbac:groups=serving.knative.dev,resources=services,verbs=list

// Setup registers the injection and delete-protection handlers on mgr's webhook server. They
// read through the API reader, not the cache: a workload is often applied in the same breath as
// its Decofile, and a webhook that answers from a stale cache would inject nothing.
func Setup(mgr ctrl.Manager, o Options) error {
	srv := mgr.GetWebhookServer()
	if srv == nil {
		return fmt.Errorf("the manager has no webhook server: the Decofile injection webhook needs one")
	}
	reader := mgr.GetAPIReader()
	srv.Register(MutatePath, &webhook.Admission{Handler: &Injector{Reader: reader, S3: o.S3}})
	srv.Register(ValidateDeletePath, &webhook.Admission{Handler: &Protector{Reader: reader}})
	return nil
}
