package inspect

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode"
)

// Node is one object of a tree: what a Decofile owns and what it reaches, with state.
type Node struct {
	// Kind of the object.
	Kind string `json:"kind"`
	// Name of the object.
	Name string `json:"name"`
	// State of the object.
	State State `json:"state"`
	// Message says what the object holds or why it is not ready.
	Message string `json:"message,omitempty"`
	// Children are the objects this one owns or reaches.
	Children []Node `json:"children,omitempty"`
}

// Healthy reports whether n and everything under it is Ready.
func (n Node) Healthy() bool {
	if n.State != StateReady {
		return false
	}
	for _, c := range n.Children {
		if !c.Healthy() {
			return false
		}
	}
	return true
}

// Workload is an injected Deployment, StatefulSet or Knative Service, as a tree shows it.
type Workload struct {
	// Kind is Deployment, StatefulSet or Service (Knative).
	Kind string
	// Name of the workload.
	Name string
	// Selector picks the workload's pods; nil when it has none the tree can read.
	Selector labels.Selector
	// Ready and Desired replicas.
	Ready, Desired int32
}

// Reach is what a Decofile reaches, as read from the API server. A nil field was not found;
// Forbidden lists what the caller's rights did not let it read.
type Reach struct {
	// ConfigMap holding the content (configmap target).
	ConfigMap *corev1.ConfigMap
	// ReloadSecret is whether the reload token's Secret exists.
	ReloadSecret bool
	// Workloads injected with the Decofile.
	Workloads []Workload
	// Pods carrying the Decofile's label.
	Pods []corev1.Pod
	// Forbidden names the kinds the caller may not read.
	Forbidden []string
}

// DecofileTree is a Decofile with what it owns (its stored content, its reload Secret) and what
// it reaches (the injected workloads and their pods).
func DecofileTree(d *decov1.Decofile, r Reach) Node {
	s := Decofile(d)
	root := Node{Kind: KindDecofile, Name: d.Name, State: s.State, Message: s.Message}
	root.Children = append(root.Children, storedNode(d, r.ConfigMap))
	secret := Node{Kind: "Secret", Name: d.ReloadSecretName(), State: StateReady, Message: "reload token"}
	if !r.ReloadSecret {
		secret.State, secret.Message = StateProgressing, "not created yet: pods are told once it exists"
	}
	root.Children = append(root.Children, secret)
	placed := make([]bool, len(r.Pods))
	for _, w := range r.Workloads {
		wn := Node{Kind: w.Kind, Name: w.Name, State: StateReady, Message: fmt.Sprintf("%d/%d replicas ready", w.Ready, w.Desired)}
		if w.Ready < w.Desired {
			wn.State = StateProgressing
		}
		for i := range r.Pods {
			if !placed[i] && w.Selector != nil && w.Selector.Matches(labels.Set(r.Pods[i].Labels)) {
				placed[i] = true
				wn.Children = append(wn.Children, podNode(&r.Pods[i]))
			}
		}
		root.Children = append(root.Children, wn)
	}
	for i := range r.Pods {
		if !placed[i] {
			root.Children = append(root.Children, podNode(&r.Pods[i]))
		}
	}
	for _, kind := range r.Forbidden {
		root.Children = append(root.Children, Node{Kind: kind, State: StateUnknown, Message: "not shown: your credentials may not read " + kind})
	}
	return root
}

// storedNode is where the content is stored, and whether it holds what the status says.
func storedNode(d *decov1.Decofile, cm *corev1.ConfigMap) Node {
	st := &d.Status
	if st.S3URL != "" {
		return Node{Kind: "S3Object", Name: st.S3URL, State: StateReady, Message: "content " + short(st.ContentHash)}
	}
	name := st.ConfigMapName
	if name == "" {
		name = d.ConfigMapName()
	}
	n := Node{Kind: "ConfigMap", Name: name}
	key := decov1.KeyJSON
	if st.Format == decov1.FormatBin {
		key = decov1.KeyBin
	}
	switch {
	case cm == nil && st.StoredHash == "":
		n.State, n.Message = StateProgressing, "nothing stored yet"
	case cm == nil:
		n.State, n.Message = StateFailing, "missing: the operator writes it again"
	case st.StoredHash == "":
		n.State, n.Message = StateProgressing, "not yet recorded in the Decofile's status"
	case encode.Hash([]byte(cm.Data[key])) != st.StoredHash:
		n.State, n.Message = StateFailing, key+" differs from what the operator stored: changed outside the operator"
	default:
		n.State, n.Message = StateReady, fmt.Sprintf("%s, content %s", key, short(st.ContentHash))
	}
	return n
}

// podNode is a pod with its phase and readiness.
func podNode(p *corev1.Pod) Node {
	n := Node{Kind: "Pod", Name: p.Name, State: StateProgressing, Message: string(p.Status.Phase)}
	if p.DeletionTimestamp != nil {
		n.Message = "terminating"
		return n
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			n.State, n.Message = StateReady, "Running, ready"
		}
	}
	if p.Status.Phase == corev1.PodFailed {
		n.State = StateFailing
	}
	return n
}

// short is the first 12 characters of a hash.
func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
