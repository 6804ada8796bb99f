package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	mirrorv1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/inspect"
	"github.com/siteops/siteops/internal/mirror/verify"
	"github.com/siteops/siteops/internal/tenant/acl"
	"github.com/siteops/siteops/internal/tenant/provision"
	"github.com/siteops/siteops/internal/tenant/rollout"
	"github.com/siteops/siteops/internal/workload"
)

// traceOptions are the flags of `siteops trace`.
type traceOptions struct {
	kubeFlags
	output string
	repo   string
}

func newTraceCommand() *cobra.Command {
	o := traceOptions{output: outputTable}
	cmd := &cobra.Command{
		Use:   "trace KIND/NAME",
		Short: "Follow a site pod, workload, Decofile, tenant namespace or mirrored object through siteops, link by link",
		Long: "Kinds: pod, deployment, statefulset, ksvc (Knative Service), decofile, namespace, and any other\n" +
			"resource (configmap, secret, or resource.group) for the mirror rules and targets that write it to git.\n" +
			"Each link is read with your own credentials; a link they may not read says so.\n" +
			"Exit status: 0 when every link is Ready, 1 otherwise.",
		Example: "  siteops trace pod/shop-7d9c5-x2x4q -n sites-shop\n" +
			"  siteops trace decofile/shop\n" +
			"  siteops trace namespace/sites-shop\n" +
			"  siteops trace configmap/settings -o json\n" +
			"  siteops trace configmap/settings --repo ~/src/cluster-state",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, name, ok := strings.Cut(args[0], "/")
			if !ok || kind == "" || name == "" {
				return fmt.Errorf("%q: want KIND/NAME, such as pod/shop-1 or decofile/shop", args[0])
			}
			if err := validStructuredOutput(o.output); err != nil {
				return err
			}
			c, ns, err := o.client()
			if err != nil {
				return err
			}
			var repo *git.Repository
			if o.repo != "" {
				if repo, err = verify.OpenRepository(o.repo); err != nil {
					return fmt.Errorf("--repo: %w", err)
				}
			}
			links, err := trace(cmd.Context(), c, ns, strings.ToLower(kind), name, repo)
			if err != nil {
				return err
			}
			if o.output != outputTable {
				if err := printStructured(cmd.OutOrStdout(), o.output, struct {
					Links   []inspect.Link `json:"links"`
					Healthy bool           `json:"healthy"`
				}{links, inspect.Healthy(links)}); err != nil {
					return err
				}
			} else {
				if err := printLinks(cmd.OutOrStdout(), links, terminal(cmd.OutOrStdout()), time.Now()); err != nil {
					return err
				}
			}
			if !inspect.Healthy(links) {
				return &exitError{code: 1, msg: fmt.Sprintf("%s: %s", args[0], firstProblem(links))}
			}
			return nil
		},
	}
	o.bind(cmd.Flags(), "namespace of the object (default: the context's namespace)")
	cmd.Flags().StringVarP(&o.output, "output", "o", o.output, "output format: table, json or yaml")
	cmd.Flags().StringVar(&o.repo, "repo", "", "a clone (path) or URL of the mirror's repository: a mirrored object's trace then ends with the last commit of its file, its author and attribution")
	return cmd
}

// firstProblem names the last Failing link, the most specific of the chain (the pod behind, not
// the Decofile that failed for it, nor the pod not Ready while it is stuck), or else the first
// link that is not Ready.
func firstProblem(links []inspect.Link) string {
	i := -1
	for j, l := range links {
		if l.State == inspect.StateFailing {
			i = j
		}
	}
	if i < 0 {
		i = slices.IndexFunc(links, func(l inspect.Link) bool { return l.State != inspect.StateReady })
	}
	if i < 0 {
		return "nothing to trace"
	}
	return fmt.Sprintf("%s is %s: %s", links[i].What, links[i].State, links[i].Message)
}

// trace reads the chain of the object kind/name in namespace ns; repo, when set, is a clone of
// the mirror's repository to read a mirrored object's last commit from.
func trace(ctx context.Context, c client.Client, ns, kind, name string, repo *git.Repository) ([]inspect.Link, error) {
	switch kind {
	case "decofile", "decofiles", "df":
		return decofileLinks(ctx, c, client.ObjectKey{Namespace: ns, Name: name}, "")
	case "pod", "pods", "po":
		return podLinks(ctx, c, client.ObjectKey{Namespace: ns, Name: name})
	case "deployment", "deployments", "deploy", "statefulset", "statefulsets", "sts", "ksvc":
		return workloadLinks(ctx, c, ns, kind, name)
	case "namespace", "namespaces", "ns":
		return tenantLinks(ctx, c, name)
	}
	return mirrorLinks(ctx, c, ns, kind, name, repo)
}

// decofileLinks is the Decofile's chain; pod names the pod the trace started from, if any.
func decofileLinks(ctx context.Context, c client.Reader, key client.ObjectKey, pod string) ([]inspect.Link, error) {
	var d decov1.Decofile
	if err := c.Get(ctx, key, &d); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			return []inspect.Link{{What: "decofile", Object: "Decofile/" + key.Name, State: inspect.StateFailing, Message: readProblem(err)}}, nil
		}
		return nil, fmt.Errorf("get Decofile %s: %w", key, err)
	}
	var cm *corev1.ConfigMap
	if d.Status.S3URL == "" {
		name := d.Status.ConfigMapName
		if name == "" {
			name = d.ConfigMapName()
		}
		var got corev1.ConfigMap
		switch err := c.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: name}, &got); {
		case err == nil:
			cm = &got
		case apierrors.IsForbidden(err):
			links := inspect.DecofileTrace(&d, nil, pod)
			for i := range links {
				if links[i].What == "stored" {
					links[i].State, links[i].Message = inspect.StateUnknown, readProblem(err)
				}
			}
			return links, nil
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("get ConfigMap %s/%s: %w", key.Namespace, name, err)
		}
	}
	return inspect.DecofileTrace(&d, cm, pod), nil
}

// readProblem is a link's message for an object that could not be read.
func readProblem(err error) string {
	if apierrors.IsForbidden(err) {
		return "forbidden: your credentials may not read it"
	}
	return "not found"
}

// podLinks is a pod, the workload that made it, then its Decofile's chain.
func podLinks(ctx context.Context, c client.Reader, key client.ObjectKey) ([]inspect.Link, error) {
	var p corev1.Pod
	if err := c.Get(ctx, key, &p); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			return []inspect.Link{{What: "pod", Object: "Pod/" + key.Name, State: inspect.StateFailing, Message: readProblem(err)}}, nil
		}
		return nil, fmt.Errorf("get pod %s: %w", key, err)
	}
	links := []inspect.Link{inspect.PodLink(&p)}
	df := p.Labels[decov1.LabelDecofile]
	if df == "" {
		return append(links, inspect.Link{What: "decofile", State: inspect.StateUnknown,
			Message: "the pod carries no " + decov1.LabelDecofile + " label: no Decofile was injected"}), nil
	}
	if w, ok := owningWorkload(ctx, c, &p, df); ok {
		links = append(links, w)
	}
	rest, err := decofileLinks(ctx, c, client.ObjectKey{Namespace: key.Namespace, Name: df}, p.Name)
	return append(links, rest...), err
}

// owningWorkload finds the injected workload whose selector matches the pod.
func owningWorkload(ctx context.Context, c client.Reader, p *corev1.Pod, df string) (inspect.Link, bool) {
	injected := []client.ListOption{client.InNamespace(p.Namespace), client.MatchingLabels{decov1.LabelDecofile: df}}
	var deps appsv1.DeploymentList
	if c.List(ctx, &deps, injected...) == nil {
		for _, w := range deps.Items {
			if s := selectorOf(w.Spec.Selector); s != nil && s.Matches(labels.Set(p.Labels)) {
				return workloadLink("Deployment", &w.ObjectMeta, w.Status.ReadyReplicas, replicas(w.Spec.Replicas)), true
			}
		}
	}
	var sets appsv1.StatefulSetList
	if c.List(ctx, &sets, injected...) == nil {
		for _, w := range sets.Items {
			if s := selectorOf(w.Spec.Selector); s != nil && s.Matches(labels.Set(p.Labels)) {
				return workloadLink("StatefulSet", &w.ObjectMeta, w.Status.ReadyReplicas, replicas(w.Spec.Replicas)), true
			}
		}
	}
	if svc := p.Labels["serving.knative.dev/service"]; svc != "" {
		if l, _, err := knativeLink(ctx, c, p.Namespace, svc); err == nil {
			return l, true
		}
	}
	return inspect.Link{}, false
}

// workloadLink is an injected workload: its readiness and why it got its Decofile.
func workloadLink(kind string, om *metav1.ObjectMeta, ready, desired int32) inspect.Link {
	l := inspect.Link{What: "workload", Object: kind + "/" + om.Name, State: inspect.StateReady,
		Message: fmt.Sprintf("%d/%d ready; %s", ready, desired, inspect.WhyDecofile(om.Annotations, om.Labels, om.Namespace))}
	if ready < desired {
		l.State = inspect.StateProgressing
	}
	return l
}

// knativeLink reads a Knative Service as a workload link, with its labels.
func knativeLink(ctx context.Context, c client.Reader, ns, name string) (inspect.Link, map[string]string, error) {
	var s unstructured.Unstructured
	s.SetGroupVersionKind(schema.GroupVersionKind{Group: knativeServices.Group, Version: knativeServices.Version, Kind: "Service"})
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
		return inspect.Link{}, nil, err
	}
	om := metav1.ObjectMeta{Name: s.GetName(), Namespace: ns, Annotations: s.GetAnnotations(), Labels: s.GetLabels()}
	return workloadLink("Service", &om, knativeReady(&s), 1), om.Labels, nil
}

// knativeReady is 1 when a Knative Service's Ready condition is True, else 0.
func knativeReady(s *unstructured.Unstructured) int32 {
	conds, _, _ := unstructured.NestedSlice(s.Object, "status", "conditions")
	for _, x := range conds {
		if m, ok := x.(map[string]any); ok && m["type"] == "Ready" && m["status"] == "True" {
			return 1
		}
	}
	return 0
}

// workloadLinks is a workload, then its Decofile's chain.
func workloadLinks(ctx context.Context, c client.Reader, ns, kind, name string) ([]inspect.Link, error) {
	key := client.ObjectKey{Namespace: ns, Name: name}
	var l inspect.Link
	var om metav1.ObjectMeta
	var err error
	switch kind {
	case "statefulset", "statefulsets", "sts":
		var w appsv1.StatefulSet
		if err = c.Get(ctx, key, &w); err == nil {
			om, l = w.ObjectMeta, workloadLink("StatefulSet", &w.ObjectMeta, w.Status.ReadyReplicas, replicas(w.Spec.Replicas))
		}
	case "ksvc":
		l, om.Labels, err = knativeLink(ctx, c, ns, name)
	default:
		var w appsv1.Deployment
		if err = c.Get(ctx, key, &w); err == nil {
			om, l = w.ObjectMeta, workloadLink("Deployment", &w.ObjectMeta, w.Status.ReadyReplicas, replicas(w.Spec.Replicas))
		}
	}
	if err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			return []inspect.Link{{What: "workload", Object: kind + "/" + name, State: inspect.StateFailing, Message: readProblem(err)}}, nil
		}
		return nil, fmt.Errorf("get %s %s: %w", kind, key, err)
	}
	links := []inspect.Link{l}
	df := om.Labels[decov1.LabelDecofile]
	if df == "" {
		return append(links, inspect.Link{What: "decofile", State: inspect.StateUnknown,
			Message: "the workload carries no " + decov1.LabelDecofile + " label: no Decofile was injected"}), nil
	}
	rest, err := decofileLinks(ctx, c, client.ObjectKey{Namespace: ns, Name: df}, "")
	return append(links, rest...), err
}

// tenantLinks is a namespace's cache user.
func tenantLinks(ctx context.Context, c client.Reader, name string) ([]inspect.Link, error) {
	var ns corev1.Namespace
	if err := c.Get(ctx, client.ObjectKey{Name: name}, &ns); err != nil {
		if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
			return []inspect.Link{{What: "tenant", Object: "Namespace/" + name, State: inspect.StateFailing, Message: readProblem(err)}}, nil
		}
		return nil, fmt.Errorf("get namespace %s: %w", name, err)
	}
	if ns.Annotations[decov1.AnnotationValkeyACL] != "true" {
		return []inspect.Link{{What: "tenant", Object: "Namespace/" + name, State: inspect.StateUnknown,
			Message: "not a tenant: the namespace is not annotated " + decov1.AnnotationValkeyACL + "=true"}}, nil
	}
	var s metav1.PartialObjectMetadata
	s.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	err := c.Get(ctx, client.ObjectKey{Namespace: name, Name: decov1.ValkeyACLSecretName}, &s)
	links := inspect.TenantTrace(&ns, err == nil)
	if apierrors.IsForbidden(err) {
		links[1].State, links[1].Message = inspect.StateUnknown, readProblem(err)
	}
	if st, _ := provision.StateFrom(&ns); len(st.Retiring) > 0 {
		links = append(links, rotationLink(ctx, c, name, st.RetiringSince))
	}
	return links, nil
}

// rotationLink is, during a password rotation, the injected workloads that still run pods
// started with an earlier password: the ones the operator waits for before it removes it. The
// current revision is derived from the Secret, which is read but never printed.
func rotationLink(ctx context.Context, c client.Reader, ns string, since time.Time) inspect.Link {
	var s corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: decov1.ValkeyACLSecretName}, &s); err != nil {
		return inspect.RotationLink(nil, since, fmt.Errorf("read Secret %s: %s", decov1.ValkeyACLSecretName, readProblem(err)))
	}
	rev := provision.Revision(acl.User{Name: string(s.Data[decov1.ValkeyACLUsernameKey]), Password: string(s.Data[decov1.ValkeyACLPasswordKey])})
	pending, err := (&rollout.Roller{Workloads: workload.Lister{Reader: c}}).Pending(ctx, ns, rev)
	if apierrors.IsForbidden(err) {
		err = errors.New(readProblem(err))
	}
	names := make([]string, len(pending))
	for i, w := range pending {
		names[i] = w.String()
	}
	return inspect.RotationLink(names, since, err)
}

// mirrorLinks is the rules and targets that write the object kind/name to git, and with repo
// (a clone of the targets' repository) the last commit of its file.
func mirrorLinks(ctx context.Context, c client.Client, ns, kind, name string, repo *git.Repository) ([]inspect.Link, error) {
	gr, namespaced, err := resourceOf(c, kind)
	if err != nil {
		return nil, err
	}
	objNS := ns
	if !namespaced {
		objNS = ""
	}
	var rules []inspect.Rule
	if namespaced {
		var wrs mirrorv1.WatchRuleList
		if err := c.List(ctx, &wrs, client.InNamespace(ns)); err != nil && !apierrors.IsForbidden(err) {
			return nil, fmt.Errorf("list WatchRules in %s: %w", ns, err)
		}
		for _, w := range wrs.Items {
			rules = append(rules, inspect.Rule{Kind: "WatchRule", Name: w.Name, Namespace: w.Namespace, Target: w.Spec.TargetRef, Rules: w.Spec.Rules})
		}
	}
	var cwrs mirrorv1.ClusterWatchRuleList
	if err := c.List(ctx, &cwrs); err != nil && !apierrors.IsForbidden(err) {
		return nil, fmt.Errorf("list ClusterWatchRules: %w", err)
	}
	for _, w := range cwrs.Items {
		rules = append(rules, inspect.Rule{Kind: "ClusterWatchRule", Name: w.Name, Target: w.Spec.TargetRef, Rules: w.Spec.Rules})
	}
	targets := map[string]*mirrorv1.GitTarget{}
	for _, r := range rules {
		key := client.ObjectKey{Namespace: r.TargetNamespace(), Name: r.Target.Name}
		var t mirrorv1.GitTarget
		if err := c.Get(ctx, key, &t); err == nil {
			targets[key.String()] = &t
		}
	}
	var lastCommit inspect.CommitLookup
	if repo != nil {
		lastCommit = func(branch, path string) inspect.Link { return commitLink(repo, branch, path) }
	}
	return inspect.MirrorTrace(gr, objNS, name, rules, targets, lastCommit), nil
}

// commitLink is the last commit on branch of repo that changed path: who it names as the
// author, and the attribution result its trailers state.
func commitLink(repo *git.Repository, branch, path string) inspect.Link {
	l := inspect.Link{What: "commit", State: inspect.StateReady}
	fc, found, err := verify.LastChange(repo, branch, path)
	switch {
	case err != nil:
		l.State, l.Message = inspect.StateUnknown, "cannot read the history of --repo: "+err.Error()
	case !found:
		l.State, l.Message = inspect.StateUnknown, fmt.Sprintf("no commit on %s of --repo changed %s (fetch the clone if the mirror pushed since)", branch, path)
	default:
		attribution := strings.Join(fc.Attribution, ", ")
		if attribution == "" {
			attribution = "not stated (no Attribution trailer)"
		}
		l.Object, l.Since = "Commit/"+fc.Commit[:min(12, len(fc.Commit))], &fc.When
		l.Message = fmt.Sprintf("%q by %s <%s>, attribution %s", fc.Subject, fc.Author.Name, fc.Author.Email, attribution)
	}
	return l
}

// resourceOf resolves a resource as typed (configmap, secrets, deployments.apps) with the API
// server's discovery, and whether it is namespaced.
func resourceOf(c client.Client, kind string) (schema.GroupResource, bool, error) {
	resource, group, _ := strings.Cut(kind, ".")
	gvr, err := c.RESTMapper().ResourceFor(schema.GroupVersionResource{Group: group, Resource: resource})
	if err != nil {
		return schema.GroupResource{}, false, fmt.Errorf("%s: not a resource the API server serves: %w", kind, err)
	}
	gvk, err := c.RESTMapper().KindFor(gvr)
	if err != nil {
		return schema.GroupResource{}, false, fmt.Errorf("%s: %w", kind, err)
	}
	m, err := c.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return schema.GroupResource{}, false, fmt.Errorf("%s: %w", kind, err)
	}
	return gvr.GroupResource(), m.Scope.Name() == "namespace", nil
}

// printLinks writes one line per link: what, object, state, since, message.
func printLinks(out io.Writer, links []inspect.Link, color bool, now time.Time) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LINK\tOBJECT\tSTATE\tSINCE\tMESSAGE")
	st := tableStyle{color: color}
	for _, l := range links {
		since := ""
		if l.Since != nil {
			since = duration.HumanDuration(now.Sub(*l.Since))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", l.What, l.Object, st.stateCell(inspect.Summary{State: l.State}), since, strings.Join(strings.Fields(l.Message), " "))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write the trace: %w", err)
	}
	return nil
}
