// Package lastwrite remembers the resourceVersion of a controller's last write of each object,
// so that a controller deciding from the manager's cache can tell when the cache may not have
// its own write yet, and read from the API server instead: a decision from a cache without it
// would write again what was just written, or find nothing to do.
package lastwrite

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// Tracker holds the last write per object. The zero value is ready; it is safe for concurrent
// use.
type Tracker struct {
	m sync.Map // types.NamespacedName → string
}

// Wrote records that a write of key left it at resourceVersion rv; "" records nothing.
func (t *Tracker) Wrote(key types.NamespacedName, rv string) {
	if rv != "" {
		t.m.Store(key, rv)
	}
}

// Pending returns the resourceVersion of the last write of key when an object read at
// resourceVersion seen may not include it; once seen does, the write is forgotten. A seen that
// cannot be compared counts as not including it.
func (t *Tracker) Pending(key types.NamespacedName, seen string) (string, bool) {
	v, ok := t.m.Load(key)
	if !ok {
		return "", false
	}
	written := v.(string)
	if newer, err := resourceversion.CompareResourceVersion(written, seen); (err == nil && newer <= 0) || written == seen {
		t.m.CompareAndDelete(key, v)
		return "", false
	}
	return written, true
}

// Forget drops what is remembered of key: the object is gone.
func (t *Tracker) Forget(key types.NamespacedName) { t.m.Delete(key) }

// Len counts the objects whose last write is remembered.
func (t *Tracker) Len() int {
	n := 0
	t.m.Range(func(any, any) bool { n++; return true })
	return n
}
