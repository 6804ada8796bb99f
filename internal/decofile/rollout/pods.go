package rollout

import (
	"context"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/notify"
)

// DefaultReloadPort is used when a pod declares no port at all.
const DefaultReloadPort = 8000

// selectPods lists the Decofile's pods: labelled deco.sites/decofile=<name>, plus, for older
// workloads, app.deco/deploymentId=<deploymentId>. Each pod appears once, in name order.
func selectPods(ctx context.Context, r client.Reader, df *decov1alpha1.Decofile) ([]corev1.Pod, error) {
	seen := map[string]bool{}
	var out []corev1.Pod
	for _, sel := range podSelectors(df) {
		var list corev1.PodList
		if err := r.List(ctx, &list, client.InNamespace(df.Namespace), sel); err != nil {
			return nil, fmt.Errorf("list pods %v: %w", map[string]string(sel), err)
		}
		for _, p := range list.Items {
			if !seen[p.Name] {
				seen[p.Name] = true
				out = append(out, p)
			}
		}
	}
	slices.SortFunc(out, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// podSelectors are the label selectors of df's pods: labelled deco.sites/decofile=<name>, or,
// for older workloads, app.deco/deploymentId=<deploymentId>.
func podSelectors(df *decov1alpha1.Decofile) []client.MatchingLabels {
	return []client.MatchingLabels{
		{decov1alpha1.LabelDecofile: df.Name},
		{decov1alpha1.LabelDeploymentID: df.DeploymentIDOrName()},
	}
}

// podListGVK is the kind of a list of pods, for metadata-only lists.
var podListGVK = corev1.SchemeGroupVersion.WithKind("PodList")

// Target turns a pod into what the notifier needs, with SkipReason set when the pod cannot
// take a notification now (being deleted, not Running, no IP) or must not get one (hostNetwork).
func Target(p *corev1.Pod) notify.Pod {
	c := injectedContainer(p)
	t := notify.Pod{Name: p.Name, IP: p.Status.PodIP, Port: reloadPort(p, c), MountPath: mountPath(p, c), Token: literalToken(c),
		UID: string(p.UID), AcceptEncoding: p.Annotations[decov1alpha1.AnnotationReloadAcceptEncoding]}
	switch {
	case p.DeletionTimestamp != nil:
		t.SkipReason = "being deleted"
	case p.Status.Phase != corev1.PodRunning:
		t.SkipReason = fmt.Sprintf("phase %s", orUnknown(string(p.Status.Phase)))
	case p.Status.PodIP == "":
		t.SkipReason = "no pod IP"
	case p.Spec.HostNetwork:
		// Its IP is the node's: a tenant-chosen port there would point the manager's calls (with
		// the reload token and an excerpt of the answer in status) at the node's own services.
		t.SkipReason = "uses the node's network (hostNetwork); the operator does not call node addresses"
	}
	return t
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// injectedContainer is the container carrying DECO_RELEASE (set by the webhook), else the one the
// deco.sites/decofile-container annotation names, else "app", else the first.
// literalToken is the reload token a pod's spec holds as a plain value, as the published operator
// (v0.11) injected it; "" for a Secret reference. Such a pod checks pushes against that value
// until its workload is re-admitted, so sending it keeps adopted sites notified meanwhile. It
// is the tenant's own value sent to the tenant's own pod: it reveals nothing.
func literalToken(c *corev1.Container) string {
	if c == nil {
		return ""
	}
	for _, e := range c.Env {
		if e.Name == decov1alpha1.EnvReloadToken && e.ValueFrom == nil {
			return strings.TrimSpace(e.Value)
		}
	}
	return ""
}

func injectedContainer(p *corev1.Pod) *corev1.Container {
	cs := p.Spec.Containers
	for i := range cs {
		if slices.ContainsFunc(cs[i].Env, func(e corev1.EnvVar) bool { return e.Name == decov1alpha1.EnvRelease }) {
			return &cs[i]
		}
	}
	for _, want := range []string{p.Annotations[decov1alpha1.AnnotationContainer], "app"} {
		for i := range cs {
			if want != "" && cs[i].Name == want {
				return &cs[i]
			}
		}
	}
	if len(cs) > 0 {
		return &cs[0]
	}
	return nil
}

// reloadPort: the deco.sites/reload-port annotation, else a container port named "http", else
// the injected container's first port, else 8000.
func reloadPort(p *corev1.Pod, c *corev1.Container) int32 {
	if v, err := strconv.ParseInt(strings.TrimSpace(p.Annotations[decov1alpha1.AnnotationReloadPort]), 10, 32); err == nil && v > 0 && v < 65536 {
		return int32(v)
	}
	for _, ct := range p.Spec.Containers {
		for _, port := range ct.Ports {
			if port.Name == "http" {
				return port.ContainerPort
			}
		}
	}
	if c != nil && len(c.Ports) > 0 {
		return c.Ports[0].ContainerPort
	}
	return DefaultReloadPort
}

// mountPath is the folder of the mounted decofile (from the container's file:// DECO_RELEASE),
// else the deco.sites/decofile-mount-path annotation, else the default. Long-poll names
// <mountPath>/timestamp.txt.
func mountPath(p *corev1.Pod, c *corev1.Container) string {
	if c != nil {
		for _, e := range c.Env {
			if e.Name == decov1alpha1.EnvRelease {
				if u, err := url.Parse(e.Value); err == nil && u.Scheme == "file" && u.Path != "" {
					return path.Dir(u.Path)
				}
			}
		}
	}
	if mp := strings.TrimSpace(p.Annotations[decov1alpha1.AnnotationMountPath]); path.IsAbs(mp) {
		return mp
	}
	return decov1alpha1.DefaultMountPath
}

// podListMaxAge is how old a listing of a Decofile's pods may be when a pod is notified from
// it: half a second, and less than the notifier's backoff, so a pod tried again is always looked
// at anew. A pod's IP goes to another pod only after the pod was marked for deletion, its
// containers stopped and a new sandbox was made: far longer than this.
func podListMaxAge(backoff time.Duration) time.Duration {
	return min(500*time.Millisecond, backoff/2)
}

// podView is a Decofile's pods as listed at most maxAge ago. A rollout looks each pod up
// in it just before notifying it: a rollout to 1000 pods lists them a few times instead of
// reading each from the API server.
type podView struct {
	reader client.Reader
	df     *decov1alpha1.Decofile
	maxAge time.Duration

	mu     sync.Mutex
	listed time.Time
	byName map[string]*corev1.Pod
}

// listPods lists df's pods (selectPods) and returns them with a view that starts from this
// listing.
func listPods(ctx context.Context, r client.Reader, df *decov1alpha1.Decofile, maxAge time.Duration) ([]corev1.Pod, *podView, error) {
	v := &podView{reader: r, df: df, maxAge: maxAge}
	pods, err := v.list(ctx)
	return pods, v, err
}

func (v *podView) list(ctx context.Context) ([]corev1.Pod, error) {
	pods, err := selectPods(ctx, v.reader, v.df)
	if err != nil {
		return nil, err
	}
	v.byName = make(map[string]*corev1.Pod, len(pods))
	for i := range pods {
		v.byName[pods[i].Name] = &pods[i]
	}
	v.listed = time.Now()
	return pods, nil
}

// refresh is the view's notify.Refresher: the pod as last listed, listed again first when the
// listing is older than maxAge. One worker lists while the others wait for its answer.
// A pod that is gone, or no longer labelled for the Decofile, is skipped.
func (v *podView) refresh(ctx context.Context, name string) (notify.Pod, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if time.Since(v.listed) > v.maxAge {
		if _, err := v.list(ctx); err != nil {
			return notify.Pod{Name: name}, err
		}
	}
	p, ok := v.byName[name]
	if !ok {
		return notify.Pod{Name: name, SkipReason: "pod no longer exists or no longer belongs to the Decofile"}, nil
	}
	return Target(p), nil
}
