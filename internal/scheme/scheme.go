// Package scheme builds the runtime.Scheme holding every Kubernetes type siteops reads or writes.
package scheme

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
)

// New returns a scheme with the built-in Kubernetes types, CRDs and the siteops APIs.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(apiextensionsv1.AddToScheme(s))
	utilruntime.Must(decov1alpha1.AddToScheme(s))
	utilruntime.Must(mirrorv1alpha1.AddToScheme(s))
	return s
}
