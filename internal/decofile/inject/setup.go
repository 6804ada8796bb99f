package inject

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// Options configures the injection webhooks.
type Options struct {
	// S3 tells pods where s3-target Decofiles are served; unset means S3 is not configured.
	S3 S3Config
}

// +kubebuilder:rbac:groups=deco.sites,resources=decofiles,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces;configmaps,verbs=get
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets,verbs=list
// +kubebuilder:rbac:groups=serving.knative.dev,resources=services,verbs=list

// Setup registers the injection and delete-protection handlers on mgr's webhook server. The
// injection webhook answers from mgr's cache, where it indexes Decofiles by deploymentId
// (IndexDeploymentID) and watches Secrets' metadata; it reads the API server for what the cache
// has not seen yet, since a workload is often applied in the same breath as its Decofile. The
// delete protection reads the API server: a workload injected a moment ago must hold its
// Decofile.
func Setup(mgr ctrl.Manager, o Options) error {
	srv := mgr.GetWebhookServer()
	if srv == nil {
		return fmt.Errorf("the manager has no webhook server: the Decofile injection webhook needs one")
	}
	ctx := context.Background()
	if err := mgr.GetFieldIndexer().IndexField(ctx, &decov1.Decofile{}, IndexDeploymentID, DeploymentIDIndexValue); err != nil {
		return fmt.Errorf("index Decofiles by deploymentId: %w", err)
	}
	// Watched from the start (the delivery controller watches the same), so the first admission
	// does not wait for the informer to fill.
	secrets := &metav1.PartialObjectMetadata{}
	secrets.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if _, err := mgr.GetCache().GetInformer(ctx, secrets); err != nil {
		return fmt.Errorf("watch Secrets' metadata: %w", err)
	}
	reader := mgr.GetAPIReader()
	srv.Register(MutatePath, &webhook.Admission{Handler: &Injector{Cache: mgr.GetCache(), Reader: reader, S3: o.S3}})
	srv.Register(ValidateDeletePath, &webhook.Admission{Handler: &Protector{Reader: reader}})
	return nil
}
