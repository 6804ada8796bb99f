// Package v1alpha1 contains the mirror.siteops.dev/v1alpha1 API: git providers, git targets and
// the watch rules that choose which cluster resources are mirrored into git.
//
// +kubebuilder:object:generate=true
// +groupName=mirror.siteops.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the mirror API.
	GroupVersion = schema.GroupVersion{Group: "mirror.siteops.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the API types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this group-version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
