package inject

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// The pod template sits at spec.template in a Deployment, a StatefulSet and a Knative Service;
// Knative's revision template adds fields of its own (containerConcurrency, timeoutSeconds, ...)
// next to the pod spec. Reading and writing only the fields the webhook changes, straight in the
// unstructured object, keeps every other field exactly as the user sent it without importing
// Knative's types.
var (
	templateLabelsPath = []string{"spec", "template", "metadata", "labels"}
	volumesPath        = []string{"spec", "template", "spec", "volumes"}
	containersPath     = []string{"spec", "template", "spec", "containers"}
)

// ReadTemplate extracts the pod template fields the webhook uses from a workload.
func ReadTemplate(obj *unstructured.Unstructured) (*Template, error) {
	t := &Template{}
	labels, _, err := unstructured.NestedStringMap(obj.Object, templateLabelsPath...)
	if err != nil {
		return nil, fmt.Errorf("read spec.template.metadata.labels: %w", err)
	}
	t.Labels = labels
	vols, _, err := unstructured.NestedSlice(obj.Object, volumesPath...)
	if err != nil {
		return nil, fmt.Errorf("read spec.template.spec.volumes: %w", err)
	}
	if err := fromList(vols, &t.Volumes); err != nil {
		return nil, fmt.Errorf("read spec.template.spec.volumes: %w", err)
	}
	cs, _, err := unstructured.NestedSlice(obj.Object, containersPath...)
	if err != nil {
		return nil, fmt.Errorf("read spec.template.spec.containers: %w", err)
	}
	for i, raw := range cs {
		m, ok := raw.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("read spec.template.spec.containers[%d]: not an object", i)
		}
		var c corev1.Container
		c.Name, _, _ = unstructured.NestedString(m, "name")
		if err := readField(m, "env", &c.Env); err != nil {
			return nil, fmt.Errorf("read spec.template.spec.containers[%d]: %w", i, err)
		}
		if err := readField(m, "envFrom", &c.EnvFrom); err != nil {
			return nil, fmt.Errorf("read spec.template.spec.containers[%d]: %w", i, err)
		}
		if err := readField(m, "volumeMounts", &c.VolumeMounts); err != nil {
			return nil, fmt.Errorf("read spec.template.spec.containers[%d]: %w", i, err)
		}
		t.Containers = append(t.Containers, c)
	}
	return t, nil
}

// WriteTemplate stores t back into obj, touching only the fields that differ from before, so
// fields the webhook does not know stay as they were.
func WriteTemplate(obj *unstructured.Unstructured, before, t *Template) error {
	if !equality.Semantic.DeepEqual(before.Labels, t.Labels) {
		if err := setOrRemove(obj.Object, len(t.Labels) == 0, stringMap(t.Labels), templateLabelsPath...); err != nil {
			return err
		}
	}
	if !equality.Semantic.DeepEqual(before.Volumes, t.Volumes) {
		list, err := toList(t.Volumes)
		if err != nil {
			return err
		}
		if err := setOrRemove(obj.Object, len(list) == 0, list, volumesPath...); err != nil {
			return err
		}
	}
	cs, _, err := unstructured.NestedSlice(obj.Object, containersPath...)
	if err != nil {
		return err
	}
	changed := false
	for i := range cs {
		m := cs[i].(map[string]any)
		b, a := before.Containers[i], t.Containers[i]
		for _, err := range []error{
			writeField(m, "env", b.Env, a.Env, &changed),
			writeField(m, "envFrom", b.EnvFrom, a.EnvFrom, &changed),
			writeField(m, "volumeMounts", b.VolumeMounts, a.VolumeMounts, &changed),
		} {
			if err != nil {
				return fmt.Errorf("write spec.template.spec.containers[%d]: %w", i, err)
			}
		}
	}
	if changed {
		return unstructured.SetNestedSlice(obj.Object, cs, containersPath...)
	}
	return nil
}

func readField[T any](m map[string]any, key string, out *[]T) error {
	list, _, err := unstructured.NestedSlice(m, key)
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	if err := fromList(list, out); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}

func writeField[T any](m map[string]any, key string, before, after []T, changed *bool) error {
	if equality.Semantic.DeepEqual(before, after) {
		return nil
	}
	list, err := toList(after)
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	*changed = true
	return setOrRemove(m, len(list) == 0, list, key)
}

func stringMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func setOrRemove(obj map[string]any, remove bool, value any, path ...string) error {
	if remove {
		unstructured.RemoveNestedField(obj, path...)
		return nil
	}
	if err := unstructured.SetNestedField(obj, value, path...); err != nil {
		return fmt.Errorf("write %v: %w", path, err)
	}
	return nil
}

// fromList converts an unstructured list into a typed slice.
func fromList[T any](list []any, out *[]T) error {
	for i, raw := range list {
		m, ok := raw.(map[string]any)
		if !ok {
			return fmt.Errorf("item %d: not an object", i)
		}
		var item T
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &item); err != nil {
			return fmt.Errorf("item %d: %w", i, err)
		}
		*out = append(*out, item)
	}
	return nil
}

// toList converts a typed slice into an unstructured list.
func toList[T any](items []T) ([]any, error) {
	out := make([]any, 0, len(items))
	for i := range items {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&items[i])
		if err != nil {
			return nil, fmt.Errorf("convert %T: %w", items[i], err)
		}
		out = append(out, m)
	}
	return out, nil
}
