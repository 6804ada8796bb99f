// Package sanitize turns a live Kubernetes object into the clean, stable YAML the mirror commits:
// server-filled and controller-owned fields are dropped (a deny-list, so unknown fields are
// kept), and the output is byte-for-byte stable so an unchanged object makes no diff.
package sanitize

import (
	"bytes"
	"fmt"
	"path"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// droppedMetadata are metadata fields the API server or controllers fill in.
var droppedMetadata = []string{
	"managedFields", "uid", "resourceVersion", "generation", "creationTimestamp", "selfLink",
	"ownerReferences", "deletionTimestamp", "deletionGracePeriodSeconds",
}

// droppedAnnotationPrefixes are annotations written by tools and controllers, not by the author
// of the object; an entry ending in '/' drops a whole domain.
var droppedAnnotationPrefixes = []string{
	"kubectl.kubernetes.io/last-applied-configuration",
	"deployment.kubernetes.io/",
	"kustomize.toolkit.fluxcd.io/",
	"helm.toolkit.fluxcd.io/",
	"source.toolkit.fluxcd.io/",
	"argocd.argoproj.io/tracking-id",
	"argocd.argoproj.io/compare-options",
	"meta.helm.sh/",
	"pv.kubernetes.io/",
	"volume.kubernetes.io/",
	"volume.beta.kubernetes.io/",
	"control-plane.alpha.kubernetes.io/leader",
	"endpoints.kubernetes.io/last-change-trigger-time",
	"autoscaling.alpha.kubernetes.io/",
}

// droppedLabelPrefixes are labels written by controllers and GitOps tools.
var droppedLabelPrefixes = []string{
	"kustomize.toolkit.fluxcd.io/",
	"helm.toolkit.fluxcd.io/",
	"argocd.argoproj.io/instance",
	"pod-template-hash",
	"controller-revision-hash",
	"controller-uid",
	"batch.kubernetes.io/controller-uid",
	"kubernetes.io/metadata.name",
}

// Object returns the sanitized YAML of obj: apiVersion, kind and metadata first, every other
// top-level field after them in sorted order, nested maps sorted. obj is not modified.
func Object(obj *unstructured.Unstructured) ([]byte, error) {
	content := obj.UnstructuredContent()
	clean := make(map[string]any, len(content))
	for k, v := range content {
		if k == "status" {
			continue
		}
		clean[k] = v
	}
	if md, ok := content["metadata"].(map[string]any); ok {
		clean["metadata"] = cleanMetadata(md)
	}
	gk := obj.GroupVersionKind().GroupKind()
	clean = cleanKind(gk, clean)
	return marshalOrdered(clean)
}

func cleanMetadata(md map[string]any) map[string]any {
	out := make(map[string]any, len(md))
	for k, v := range md {
		if !slices.Contains(droppedMetadata, k) {
			out[k] = v
		}
	}
	for _, field := range []struct {
		name     string
		prefixes []string
	}{{"annotations", droppedAnnotationPrefixes}, {"labels", droppedLabelPrefixes}} {
		m, ok := out[field.name].(map[string]any)
		if !ok {
			continue
		}
		kept := make(map[string]any, len(m))
		for k, v := range m {
			if !hasAnyPrefix(k, field.prefixes) {
				kept[k] = v
			}
		}
		if len(kept) == 0 {
			delete(out, field.name)
		} else {
			out[field.name] = kept
		}
	}
	return out
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if s == p || (strings.HasSuffix(p, "/") && strings.HasPrefix(s, p)) {
			return true
		}
	}
	return false
}

// cleanKind drops fields that the API server allocates for well-known kinds. It copies what it
// changes, so the caller's object stays untouched.
func cleanKind(gk schema.GroupKind, obj map[string]any) map[string]any {
	spec, _ := obj["spec"].(map[string]any)
	switch {
	case gk == schema.GroupKind{Kind: "Service"} && spec != nil:
		s := copyMap(spec)
		// A headless Service's clusterIP "None" is the author's choice, not an allocation.
		if ip, _ := s["clusterIP"].(string); ip != "None" {
			delete(s, "clusterIP")
			delete(s, "clusterIPs")
		}
		delete(s, "ipFamilies")
		delete(s, "ipFamilyPolicy")
		obj["spec"] = s
	case gk == schema.GroupKind{Kind: "ServiceAccount"}:
		delete(obj, "secrets")
	case gk == schema.GroupKind{Kind: "PersistentVolumeClaim"} && spec != nil:
		s := copyMap(spec)
		delete(s, "volumeName")
		obj["spec"] = s
	case gk == schema.GroupKind{Kind: "Namespace"} && spec != nil:
		s := copyMap(spec)
		if f, ok := s["finalizers"].([]any); ok && len(f) == 1 && f[0] == "kubernetes" {
			delete(s, "finalizers")
		}
		if len(s) == 0 {
			delete(obj, "spec")
		} else {
			obj["spec"] = s
		}
	}
	return obj
}

func copyMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// headKeys come first in that order; the rest follow sorted.
var headKeys = []string{"apiVersion", "kind", "metadata"}

func marshalOrdered(obj map[string]any) ([]byte, error) {
	root := &yaml.Node{Kind: yaml.MappingNode}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		if !slices.Contains(headKeys, k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range append(slices.Clone(headKeys), keys...) {
		v, ok := obj[k]
		if !ok {
			continue
		}
		var val yaml.Node
		if err := val.Encode(v); err != nil {
			return nil, fmt.Errorf("encode field %q as YAML: %w", k, err)
		}
		root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, &val)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("write YAML: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("write YAML: %w", err)
	}
	return buf.Bytes(), nil
}

// ClusterScopeDir is the folder of cluster-scoped objects, in place of a namespace.
const ClusterScopeDir = "_cluster"

// CoreGroupDir is the folder of the core API group, whose name is empty.
const CoreGroupDir = "core"

// Dir is the folder holding every object of one resource in one namespace (or the cluster
// scope when namespace is empty): <base>/<namespace or _cluster>/<group or core>/<resource>.
func Dir(base string, gr schema.GroupResource, namespace string) string {
	ns := namespace
	if ns == "" {
		ns = ClusterScopeDir
	}
	group := gr.Group
	if group == "" {
		group = CoreGroupDir
	}
	return path.Join(base, ns, group, gr.Resource)
}

// Path is the file of one object: Dir(...)/<name>.yaml.
func Path(base string, gr schema.GroupResource, namespace, name string) string {
	return Dir(base, gr, namespace) + "/" + name + ".yaml"
}

// SkipReason says why an object of gr is never written, or "" when it is written.
func SkipReason(gr schema.GroupResource, obj *unstructured.Unstructured) string {
	switch {
	case gr == schema.GroupResource{Resource: "secrets"}:
		return "Secrets are never written in plaintext"
	case gr == schema.GroupResource{Resource: "configmaps"} && obj != nil && obj.GetName() == "kube-root-ca.crt":
		return "kube-root-ca.crt is published by the cluster in every namespace"
	}
	return ""
}
