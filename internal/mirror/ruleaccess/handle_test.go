package ruleaccess_test

import (
	"context"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/siteops/siteops/internal/mirror/ruleaccess"
)

// TestHandleSkipsWhatIsNotAReadGrant: other kinds, deletions and updates that keep the spec are
// allowed without asking discovery or the authorizer (the Checker has neither here), and an
// undecodable rule is refused.
func TestHandleSkipsWhatIsNotAReadGrant(t *testing.T) {
	c := &ruleaccess.Checker{}
	spec := []byte(`{"spec":{"targetRef":{"name":"site"},"rules":[{"apiGroups":["rbac.authorization.k8s.io"],"resources":["rolebindings"]}]}}`)
	relabeled := []byte(`{"metadata":{"labels":{"a":"b"}},"spec":{"targetRef":{"name":"site"},"rules":[{"apiGroups":["rbac.authorization.k8s.io"],"resources":["rolebindings"]}]}}`)
	kind := func(k string) metav1.GroupVersionKind {
		return metav1.GroupVersionKind{Group: "mirror.siteops.dev", Version: "v1alpha1", Kind: k}
	}
	for name, tc := range map[string]struct {
		req     admissionv1.AdmissionRequest
		allowed bool
	}{
		"other kind":       {admissionv1.AdmissionRequest{Kind: kind("GitTarget"), Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: spec}}, true},
		"delete":           {admissionv1.AdmissionRequest{Kind: kind("WatchRule"), Operation: admissionv1.Delete, OldObject: runtime.RawExtension{Raw: spec}}, true},
		"same spec":        {admissionv1.AdmissionRequest{Kind: kind("WatchRule"), Operation: admissionv1.Update, Object: runtime.RawExtension{Raw: relabeled}, OldObject: runtime.RawExtension{Raw: spec}}, true},
		"same spec (cwr)":  {admissionv1.AdmissionRequest{Kind: kind("ClusterWatchRule"), Operation: admissionv1.Update, Object: runtime.RawExtension{Raw: relabeled}, OldObject: runtime.RawExtension{Raw: spec}}, true},
		"undecodable rule": {admissionv1.AdmissionRequest{Kind: kind("WatchRule"), Operation: admissionv1.Create, Object: runtime.RawExtension{Raw: []byte(`{"spec":`)}}, false},
	} {
		t.Run(name, func(t *testing.T) {
			resp := c.Handle(context.Background(), admission.Request{AdmissionRequest: tc.req})
			if resp.Allowed != tc.allowed {
				t.Errorf("allowed = %v (%+v), want %v", resp.Allowed, resp.Result, tc.allowed)
			}
		})
	}
}
