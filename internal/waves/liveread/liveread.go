// Package liveread reads what a cluster runs for the cut-over check: the app-tier Flux
// Kustomizations (spec, status.inventory) and the metadata of the objects their inventories
// name. It only reads.
package liveread

import (
	"context"
	"fmt"
	"sort"

	kustv1 "github.com/fluxcd/kustomize-controller/api/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/waves/cutover"
)

// Helm release labels helm-controller puts on every object of a release.
const (
	HelmNameLabel      = "helm.toolkit.fluxcd.io/name"
	HelmNamespaceLabel = "helm.toolkit.fluxcd.io/namespace"
	helmGroup          = "helm.toolkit.fluxcd.io"
)

// helmKinds are the kinds searched for a release's objects: those a chart usually creates, and
// the stateful ones whose loss matters. Kinds the cluster does not serve are skipped.
var helmKinds = []schema.GroupVersionKind{
	{Version: "v1", Kind: "PersistentVolumeClaim"},
	{Version: "v1", Kind: "ConfigMap"},
	{Version: "v1", Kind: "Secret"},
	{Version: "v1", Kind: "Service"},
	{Version: "v1", Kind: "ServiceAccount"},
	{Group: "apps", Version: "v1", Kind: "Deployment"},
	{Group: "apps", Version: "v1", Kind: "StatefulSet"},
	{Group: "apps", Version: "v1", Kind: "DaemonSet"},
	{Group: "batch", Version: "v1", Kind: "Job"},
	{Group: "batch", Version: "v1", Kind: "CronJob"},
	{Group: "networking.k8s.io", Version: "v1", Kind: "Ingress"},
	{Group: "postgresql.cnpg.io", Version: "v1", Kind: "Cluster"},
}

// Options say what to read.
type Options struct {
	// Apps is the apps folder: Kustomizations whose spec.path lies in it are the app tier.
	Apps string
	// Namespace limits the Kustomizations read to one namespace; empty reads all.
	Namespace string
}

// NewClient returns a read client for cfg that knows Flux Kustomizations.
func NewClient(cfg *rest.Config) (client.Client, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := kustv1.AddToScheme(s); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return nil, fmt.Errorf("connect to the cluster: %w", err)
	}
	return c, nil
}

// Read reads the app-tier Kustomizations and their inventories' objects.
func Read(ctx context.Context, c client.Reader, o Options) (*cutover.Live, error) {
	var list kustv1.KustomizationList
	if err := c.List(ctx, &list, client.InNamespace(o.Namespace)); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, fmt.Errorf("the cluster serves no Flux Kustomizations (kustomize.toolkit.fluxcd.io/v1): is Flux installed? %w", err)
		}
		return nil, fmt.Errorf("list Flux Kustomizations (needs list on kustomizations.kustomize.toolkit.fluxcd.io): %w", err)
	}
	live := &cutover.Live{Label: "the live cluster", Objects: map[string]cutover.LiveObject{}}
	for i := range list.Items {
		k := &list.Items[i]
		if !cutover.InAppTier(k, o.Apps) {
			continue
		}
		live.Kustomizations = append(live.Kustomizations, *k)
		if k.Status.Inventory == nil {
			continue
		}
		for _, ref := range k.Status.Inventory.Entries {
			e, err := cutover.ParseInventoryEntry(ref)
			if err != nil {
				return nil, fmt.Errorf("inventory of Kustomization %s/%s: %w", k.Namespace, k.Name, err)
			}
			if _, done := live.Objects[e.ID()]; done {
				continue
			}
			obj, err := readObject(ctx, c, e)
			if err != nil {
				return nil, err
			}
			live.Objects[e.ID()] = obj
		}
	}
	sort.Slice(live.Kustomizations, func(a, b int) bool {
		ka, kb := live.Kustomizations[a], live.Kustomizations[b]
		return ka.Namespace+"/"+ka.Name < kb.Namespace+"/"+kb.Name
	})
	return live, nil
}

func readObject(ctx context.Context, c client.Reader, e cutover.InventoryEntry) (cutover.LiveObject, error) {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(schema.GroupVersionKind{Group: e.Group, Version: e.Version, Kind: e.Kind})
	err := c.Get(ctx, client.ObjectKey{Namespace: e.Namespace, Name: e.Name}, m)
	switch {
	case apierrors.IsNotFound(err), meta.IsNoMatchError(err):
		return cutover.LiveObject{}, nil
	case err != nil:
		return cutover.LiveObject{}, fmt.Errorf("read %s (needs get on it): %w", e.ID(), err)
	}
	obj := cutover.LiveObject{Found: true, Protected: m.GetAnnotations()[cutover.PruneAnnotation] == cutover.PruneDisabled}
	if e.Group == helmGroup && e.Kind == "HelmRelease" {
		if obj.Helm, err = releaseObjects(ctx, c, e.Namespace, e.Name); err != nil {
			return cutover.LiveObject{}, err
		}
	}
	return obj, nil
}

// releaseObjects lists the live objects helm-controller labelled as belonging to a HelmRelease.
func releaseObjects(ctx context.Context, c client.Reader, ns, name string) ([]cutover.Resource, error) {
	var out []cutover.Resource
	sel := client.MatchingLabels{HelmNameLabel: name, HelmNamespaceLabel: ns}
	for _, gvk := range helmKinds {
		l := &metav1.PartialObjectMetadataList{}
		l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := c.List(ctx, l, sel); err != nil {
			if meta.IsNoMatchError(err) {
				continue
			}
			return nil, fmt.Errorf("list the %s objects of HelmRelease %s/%s: %w", gvk.Kind, ns, name, err)
		}
		for _, item := range l.Items {
			id, kind := cutover.ID(gvk.Group, gvk.Kind, item.Namespace, item.Name)
			out = append(out, cutover.Resource{ID: id, Kind: kind})
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out, nil
}
