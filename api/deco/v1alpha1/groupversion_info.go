// Package v1alpha1 contains the deco.sites/v1alpha1 API: the Decofile resource and the names
// (annotations, labels, keys) that the Deco site runtime and users' manifests depend on.
//
// +kubebuilder:object:generate=true
// +groupName=deco.sites
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of the Decofile API.
	GroupVersion = schema.GroupVersion{Group: "deco.sites", Version: "v1alpha1"}

	// SchemeBuilder registers the API types with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the types of this group-version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Decofile{}, &DecofileList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
