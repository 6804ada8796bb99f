package watch

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestLastWriter(t *testing.T) {
	at := func(s int) *metav1.Time { tm := metav1.NewTime(time.Unix(1_800_000_000+int64(s), 0)); return &tm }
	spec := metav1.NewFieldsV1(`{"f:spec":{"f:replicas":{}}}`)
	status := metav1.NewFieldsV1(`{"f:status":{"f:ready":{}}}`)
	for _, tc := range []struct {
		name    string
		entries []metav1.ManagedFieldsEntry
		want    string
	}{
		{"latest wins", []metav1.ManagedFieldsEntry{{Manager: "kubectl", Time: at(1), FieldsV1: spec}, {Manager: "flux", Time: at(5), FieldsV1: spec}}, "flux"},
		{"status subresource never counts", []metav1.ManagedFieldsEntry{{Manager: "flux", Time: at(1), FieldsV1: spec}, {Manager: "ctrl", Time: at(9), Subresource: "status", FieldsV1: status}}, "flux"},
		{"an entry owning only status never counts", []metav1.ManagedFieldsEntry{{Manager: "flux", Time: at(1), FieldsV1: spec}, {Manager: "ctrl", Time: at(9), FieldsV1: status}}, "flux"},
		{"a tie is unknown", []metav1.ManagedFieldsEntry{{Manager: "flux", Time: at(3), FieldsV1: spec}, {Manager: "kubectl", Time: at(3), FieldsV1: spec}}, ""},
		{"one manager twice is no tie", []metav1.ManagedFieldsEntry{{Manager: "flux", Time: at(3), Operation: metav1.ManagedFieldsOperationApply, FieldsV1: spec}, {Manager: "flux", Time: at(3), Operation: metav1.ManagedFieldsOperationUpdate, FieldsV1: spec}}, "flux"},
		{"no time is unknown", []metav1.ManagedFieldsEntry{{Manager: "flux", FieldsV1: spec}}, ""},
		{"none", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := &unstructured.Unstructured{Object: map[string]any{}}
			obj.SetManagedFields(tc.entries)
			if got := LastWriter(obj); got != tc.want {
				t.Fatalf("LastWriter = %q, want %q", got, tc.want)
			}
		})
	}
}
