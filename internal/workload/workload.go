// Package workload lists and restarts the workloads siteops injects — Deployments, StatefulSets
// and Knative Services — for the parts that must start new pods: the Decofile part when a
// reload Secret was recreated, the tenant part when a namespace's credentials changed. Workloads
// are read as unstructured objects, so nothing depends on Knative's Go packages, and a kind the
// cluster does not serve is skipped.
package workload

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Kinds are the workload kinds the injection webhook mutates.
var Kinds = []schema.GroupVersionKind{
	{Group: "apps", Version: "v1", Kind: "Deployment"},
	{Group: "apps", Version: "v1", Kind: "StatefulSet"},
	{Group: "serving.knative.dev", Version: "v1", Kind: "Service"},
}

// missingKindTTL is how long a kind the API server does not serve (Knative Services where
// Knative is not installed) is not asked for again: the client's RESTMapper asks the API
// server's discovery anew on every request for a kind it does not know.
const missingKindTTL = time.Minute

// Lister lists workloads of every kind. The zero value needs Reader set; it is safe for
// concurrent use.
type Lister struct {
	// Reader reads the workloads; the callers use an uncached reader, so the operator does not
	// cache every Deployment of the cluster.
	Reader client.Reader

	mu      sync.Mutex
	missing map[schema.GroupVersionKind]time.Time
}

// List returns the workloads of every kind in namespace matching opts, skipping objects being
// deleted and kinds the API server does not serve.
func (l *Lister) List(ctx context.Context, namespace string, opts ...client.ListOption) ([]unstructured.Unstructured, error) {
	var out []unstructured.Unstructured
	for _, gvk := range Kinds {
		if l.isMissing(gvk) {
			continue
		}
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		err := l.Reader.List(ctx, list, append([]client.ListOption{client.InNamespace(namespace)}, opts...)...)
		if meta.IsNoMatchError(err) {
			l.setMissing(gvk)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list %s in %s: %w", Plural(gvk), namespace, err)
		}
		for _, w := range list.Items {
			if w.GetDeletionTimestamp() == nil {
				out = append(out, w)
			}
		}
	}
	return out, nil
}

func (l *Lister) isMissing(gvk schema.GroupVersionKind) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	until, ok := l.missing[gvk]
	return ok && time.Now().Before(until)
}

func (l *Lister) setMissing(gvk schema.GroupVersionKind) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.missing == nil {
		l.missing = map[schema.GroupVersionKind]time.Time{}
	}
	l.missing[gvk] = time.Now().Add(missingKindTTL)
}

// TemplateAnnotations are the annotations of w's pod template (Knative's spec.template too).
func TemplateAnnotations(w *unstructured.Unstructured) map[string]string {
	a, _, _ := unstructured.NestedStringMap(w.Object, "spec", "template", "metadata", "annotations")
	return a
}

// Restart sets annotation key to value on w's pod template, which makes its controller start
// new pods (as `kubectl rollout restart` does with kubectl.kubernetes.io/restartedAt).
func Restart(ctx context.Context, c client.Writer, w client.Object, key, value string) error {
	patch := client.RawPatch(types.MergePatchType,
		fmt.Appendf(nil, `{"spec":{"template":{"metadata":{"annotations":{%q:%q}}}}}`, key, value))
	if err := c.Patch(ctx, w, patch); err != nil {
		return fmt.Errorf("restart %s: %w", Name(w), err)
	}
	return nil
}

// Name is kind/name as kubectl names a workload: deployment/shop, statefulset/shop,
// service.serving.knative.dev/shop.
func Name(w client.Object) string {
	return strings.ToLower(Kind(w)) + "/" + w.GetName()
}

// Kind is w's kind, with its group unless core or apps: Deployment, StatefulSet,
// Service.serving.knative.dev.
func Kind(w client.Object) string {
	gvk := w.GetObjectKind().GroupVersionKind()
	if gvk.Group != "" && gvk.Group != "apps" {
		return gvk.Kind + "." + gvk.Group
	}
	return gvk.Kind
}

// Plural is the kind's name in messages: Deployments, StatefulSets, Knative Services.
func Plural(gvk schema.GroupVersionKind) string {
	if gvk.Group == "serving.knative.dev" {
		return "Knative " + gvk.Kind + "s"
	}
	return gvk.Kind + "s"
}
