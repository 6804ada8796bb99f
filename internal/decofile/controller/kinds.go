package controller

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// missingKindTTL is how long a kind the API server does not serve (Knative Services where
// Knative is not installed) is not asked for again: the client's RESTMapper asks the API
// server's discovery anew on every request for a kind it does not know.
const missingKindTTL = time.Minute

// missingKinds remembers the workload kinds the API server did not serve.
type missingKinds struct {
	mu    sync.Mutex
	until map[schema.GroupVersionKind]time.Time
}

// list lists into list (of kind gvk) unless gvk is not served; missing is true then, and for
// missingKindTTL after the API server last said so.
func (m *missingKinds) list(ctx context.Context, r client.Reader, gvk schema.GroupVersionKind, list client.ObjectList, opts ...client.ListOption) (missing bool, err error) {
	m.mu.Lock()
	until, known := m.until[gvk]
	m.mu.Unlock()
	if known && time.Now().Before(until) {
		return true, nil
	}
	err = r.List(ctx, list, opts...)
	if !meta.IsNoMatchError(err) {
		return false, err
	}
	m.mu.Lock()
	if m.until == nil {
		m.until = map[schema.GroupVersionKind]time.Time{}
	}
	m.until[gvk] = time.Now().Add(missingKindTTL)
	m.mu.Unlock()
	return true, nil
}
