package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/inspect"
)

// knativeServices is the list kind of Knative Services, read without Knative's types.
var knativeServices = schema.GroupVersionKind{Group: "serving.knative.dev", Version: "v1", Kind: "ServiceList"}

// treeOptions are the flags of `siteops tree`.
type treeOptions struct {
	kubeFlags
	output string
}

func newTreeCommand() *cobra.Command {
	o := treeOptions{output: outputTable}
	cmd := &cobra.Command{
		Use:   "tree decofile/NAME",
		Short: "Show what a Decofile owns and reaches: its stored content, reload Secret, injected workloads and their pods",
		Example: "  siteops tree decofile/shop -n sites-shop\n" +
			"  siteops tree df/shop -o json",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, name, ok := strings.Cut(args[0], "/")
			if !ok || name == "" {
				return fmt.Errorf("%q: want decofile/NAME", args[0])
			}
			if ks, err := kindsNamed(kind); err != nil || ks[0].kind != inspect.KindDecofile || len(ks) != 1 {
				return fmt.Errorf("%q: siteops tree shows Decofiles: want decofile/NAME", args[0])
			}
			if err := validStructuredOutput(o.output); err != nil {
				return err
			}
			c, ns, err := o.client()
			if err != nil {
				return err
			}
			root, err := decofileTree(cmd.Context(), c, client.ObjectKey{Namespace: ns, Name: name})
			if err != nil {
				return err
			}
			if o.output != outputTable {
				return printStructured(cmd.OutOrStdout(), o.output, root)
			}
			printTree(cmd.OutOrStdout(), root, "", "", terminal(cmd.OutOrStdout()))
			return nil
		},
	}
	o.bind(cmd.Flags(), "namespace of the Decofile (default: the context's namespace)")
	cmd.Flags().StringVarP(&o.output, "output", "o", o.output, "output format: table, json or yaml")
	return cmd
}

// decofileTree reads the Decofile and what it reaches with the caller's credentials. What
// those may not read is named in the tree rather than failing it.
func decofileTree(ctx context.Context, c client.Reader, key client.ObjectKey) (inspect.Node, error) {
	var d decov1.Decofile
	if err := c.Get(ctx, key, &d); err != nil {
		return inspect.Node{}, fmt.Errorf("get Decofile %s: %w", key, err)
	}
	var r inspect.Reach
	forbidden := func(kind string, err error) error {
		if apierrors.IsForbidden(err) {
			r.Forbidden = append(r.Forbidden, kind)
			return nil
		}
		return fmt.Errorf("read %s of Decofile %s: %w", kind, key, err)
	}
	if d.Status.S3URL == "" {
		name := d.Status.ConfigMapName
		if name == "" {
			name = d.ConfigMapName()
		}
		var cm corev1.ConfigMap
		switch err := c.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: name}, &cm); {
		case err == nil:
			r.ConfigMap = &cm
		case apierrors.IsNotFound(err):
		default:
			if err := forbidden("ConfigMaps", err); err != nil {
				return inspect.Node{}, err
			}
		}
	}
	var secret metav1.PartialObjectMetadata
	secret.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	switch err := c.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: d.ReloadSecretName()}, &secret); {
	case err == nil:
		r.ReloadSecret = true
	case apierrors.IsNotFound(err):
	default:
		if err := forbidden("Secrets", err); err != nil {
			return inspect.Node{}, err
		}
	}
	injected := []client.ListOption{client.InNamespace(key.Namespace), client.MatchingLabels{decov1.LabelDecofile: key.Name}}
	var deps appsv1.DeploymentList
	if err := c.List(ctx, &deps, injected...); err != nil {
		if err := forbidden("Deployments", err); err != nil {
			return inspect.Node{}, err
		}
	}
	for _, w := range deps.Items {
		r.Workloads = append(r.Workloads, inspect.Workload{Kind: "Deployment", Name: w.Name, Selector: selectorOf(w.Spec.Selector),
			Ready: w.Status.ReadyReplicas, Desired: replicas(w.Spec.Replicas)})
	}
	var sets appsv1.StatefulSetList
	if err := c.List(ctx, &sets, injected...); err != nil {
		if err := forbidden("StatefulSets", err); err != nil {
			return inspect.Node{}, err
		}
	}
	for _, w := range sets.Items {
		r.Workloads = append(r.Workloads, inspect.Workload{Kind: "StatefulSet", Name: w.Name, Selector: selectorOf(w.Spec.Selector),
			Ready: w.Status.ReadyReplicas, Desired: replicas(w.Spec.Replicas)})
	}
	ksvcs := &unstructured.UnstructuredList{}
	ksvcs.SetGroupVersionKind(knativeServices)
	switch err := c.List(ctx, ksvcs, injected...); {
	case err == nil:
		for _, s := range ksvcs.Items {
			// A Knative Service's pods carry its name in a label.
			sel := labels.SelectorFromSet(labels.Set{"serving.knative.dev/service": s.GetName()})
			r.Workloads = append(r.Workloads, inspect.Workload{Kind: "Service", Name: s.GetName(), Selector: sel, Ready: knativeReady(&s), Desired: 1})
		}
	case meta.IsNoMatchError(err), apierrors.IsNotFound(err):
		// Knative is not installed.
	default:
		if err := forbidden("Knative Services", err); err != nil {
			return inspect.Node{}, err
		}
	}
	var pods corev1.PodList
	if err := c.List(ctx, &pods, injected...); err != nil {
		if err := forbidden("Pods", err); err != nil {
			return inspect.Node{}, err
		}
	}
	r.Pods = pods.Items
	return inspect.DecofileTree(&d, r), nil
}

// replicas is a workload's desired replicas: 1 when unset, as the API server defaults it.
func replicas(n *int32) int32 {
	if n == nil {
		return 1
	}
	return *n
}

// selectorOf is a workload's pod selector; nil when it cannot be read.
func selectorOf(ls *metav1.LabelSelector) labels.Selector {
	if ls == nil {
		return nil
	}
	s, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return nil
	}
	return s
}

// printTree draws n and its children with box-drawing branches.
func printTree(out io.Writer, n inspect.Node, first, rest string, color bool) {
	ref := n.Kind
	if n.Name != "" {
		ref += "/" + n.Name
	}
	st := tableStyle{color: color}.stateCell(inspect.Summary{State: n.State})
	fmt.Fprintf(out, "%s%s  %s  %s\n", first, ref, st, strings.Join(strings.Fields(n.Message), " "))
	for i, c := range n.Children {
		if i == len(n.Children)-1 {
			printTree(out, c, rest+"└── ", rest+"    ", color)
		} else {
			printTree(out, c, rest+"├── ", rest+"│   ", color)
		}
	}
}
