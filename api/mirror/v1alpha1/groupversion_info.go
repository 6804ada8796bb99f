// Package v1alpha1 contains the mirror.siteops.dev/v1alpha1 API: git providers, git targets and
// the watch rules that choose which cluster resources are mirrored into git.
//
// +kubebuilder:object:generate=true
// +groupName=mirror.siteops.dev
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of the mirror API.
	GroupVersion = schema.GroupVersion{Group: "mirror.siteops.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the API types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(func(s *runtime.Scheme) error {
		metav1.AddToGroupVersion(s, GroupVersion)
		return nil
	})

	// AddToScheme adds the types of this group-version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// register adds the kinds declared in a file of this package to SchemeBuilder.
func register(objs ...runtime.Object) {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(GroupVersion, objs...)
		return nil
	})
}
