package watch

import (
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// LastWriter returns the field manager that wrote obj last, from its managedFields: the entry
// with the latest time, leaving out status writes (the status subresource, or an entry owning
// nothing but status), since the mirror never writes status. When several managers share the
// latest time (managedFields times have one-second precision) or none has a time, it returns ""
// (unknown), so an ignore list never hides a change another writer may have made.
func LastWriter(obj *unstructured.Unstructured) string {
	var (
		last    string
		lastAt  metav1.Time
		tie     bool
		counted bool
	)
	for _, e := range obj.GetManagedFields() {
		if e.Subresource == "status" || statusOnly(e.FieldsV1) {
			continue
		}
		if e.Time == nil {
			return ""
		}
		switch {
		case !counted || e.Time.After(lastAt.Time):
			last, lastAt, tie, counted = e.Manager, *e.Time, false, true
		case e.Time.Equal(&lastAt) && e.Manager != last:
			tie = true
		}
	}
	if tie {
		return ""
	}
	return last
}

// statusOnly reports whether a managedFields entry owns only fields under status (a controller
// writing status through the main resource, e.g. of a CRD without a status subresource).
func statusOnly(f *metav1.FieldsV1) bool {
	if f == nil || len(f.GetRawBytes()) == 0 {
		return false
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(f.GetRawBytes(), &top); err != nil || len(top) == 0 {
		return false
	}
	for k := range top {
		if k != "f:status" {
			return false
		}
	}
	return true
}
