package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	mirrorv1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/inspect"
)

// traceJSON runs trace -o json and returns its links and exit code.
func (f *getFixture) traceJSON(t *testing.T, kc, what string) ([]inspect.Link, int) {
	t.Helper()
	out, _, err := runCLI(context.Background(), "trace", what, "-o", "json", "--kubeconfig", kc)
	var got struct {
		Links []inspect.Link `json:"links"`
	}
	if jerr := json.Unmarshal([]byte(out), &got); jerr != nil {
		t.Fatalf("trace %s: %v (%v)\n%s", what, jerr, err, out)
	}
	return got.Links, exitCode(err)
}

func linkNamed(links []inspect.Link, what string) inspect.Link {
	for _, l := range links {
		if l.What == what {
			return l
		}
	}
	return inspect.Link{}
}

func TestTraceSitePod(t *testing.T) {
	f := newGetFixture(t)
	f.injectedSite(t)
	ctx := context.Background()
	out, _, err := f.run(t, "trace", "pod/site-a")
	if exitCode(err) != 1 {
		t.Fatalf("a workload with a pod not ready: exit %d (%v), want 1", exitCode(err), err)
	}
	golden(t, "trace_pod.golden", out, f.ns)

	// The pod's reload endpoint refused the last publish: trace names it as behind, with why.
	var d decov1.Decofile
	must(t, f.c.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "a-ready"}, &d))
	d.Status.ContentHash = strings.Repeat("fedcba9876543210", 4)
	cond(&d.Status, decov1.ConditionPodsNotified, metav1.ConditionFalse, decov1.ReasonNotificationFailed, "Failed to notify pods")
	d.Status.Rollout = &decov1.RolloutStatus{Total: 2, Notified: 1, Failed: 1,
		Behind: []decov1.PodBehind{{Name: "site-b", Reason: "HTTP 401: the pod refused the reload token", HTTPStatus: 401, Attempts: 3}}}
	must(t, f.c.Client.Status().Update(ctx, &d))
	links, code := f.traceJSON(t, f.kubeconfig, "pod/site-b")
	pods := linkNamed(links, "pods")
	if code != 1 || pods.State != inspect.StateFailing || !strings.Contains(pods.Message, "pod site-b is behind: HTTP 401: the pod refused the reload token (HTTP 401 after 3 attempts)") {
		t.Fatalf("a pod behind: exit %d, pods link %+v", code, pods)
	}
	if w := linkNamed(links, "workload"); w.Object != "Deployment/site" || !strings.Contains(w.Message, "no deco.sites/decofile-inject annotation") {
		t.Errorf("workload link %+v", w)
	}

	// It recovers: every pod confirms the content, every replica is ready. Exit 0.
	d.Status.NotifiedHash = d.Status.ContentHash
	cond(&d.Status, decov1.ConditionPodsNotified, metav1.ConditionTrue, decov1.ReasonNotificationSucceeded, "Successfully notified all pods")
	d.Status.Rollout = &decov1.RolloutStatus{Total: 2, Notified: 2}
	must(t, f.c.Client.Status().Update(ctx, &d))
	var p corev1.Pod
	must(t, f.c.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "site-b"}, &p))
	p.Status.Phase, p.Status.Conditions = corev1.PodRunning, []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	must(t, f.c.Client.Status().Update(ctx, &p))
	var dep appsv1.Deployment
	must(t, f.c.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "site"}, &dep))
	dep.Status.ReadyReplicas = 2
	must(t, f.c.Client.Status().Update(ctx, &dep))
	if links, code := f.traceJSON(t, f.kubeconfig, "pod/site-b"); code != 0 {
		t.Fatalf("after recovery: exit %d, links %+v", code, links)
	}
	if _, code := f.traceJSON(t, f.kubeconfig, "deployment/site"); code != 0 {
		t.Errorf("trace deployment/site after recovery: exit %d", code)
	}
}

func TestTraceAsTenantSaysForbidden(t *testing.T) {
	f := newGetFixture(t)
	f.injectedSite(t)
	tn := f.c.Tenant(t, "trace-tenant", nil)
	kc := kubeconfigFor(t, tn.Config, tn.Namespace)
	out, _, err := runCLI(context.Background(), "trace", "pod/site-a", "-n", f.ns, "--kubeconfig", kc)
	if exitCode(err) != 1 || !strings.Contains(out, "forbidden: your credentials may not read it") || strings.Contains(out, "a-ready") {
		t.Fatalf("a tenant tracing another namespace's pod: exit %d (%v)\n%s", exitCode(err), err, out)
	}
}

func TestTraceTenantAndMirror(t *testing.T) {
	f := newGetFixture(t)
	ctx := context.Background()
	links, code := f.traceJSON(t, f.kubeconfig, "namespace/"+f.ns)
	if code != 1 || linkNamed(links, "tenant").State != inspect.StateReady || linkNamed(links, "credentials").State != inspect.StateProgressing {
		t.Fatalf("a tenant without its Secret yet: exit %d, %+v", code, links)
	}
	must(t, f.c.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: decov1.ValkeyACLSecretName}}))
	if links, code := f.traceJSON(t, f.kubeconfig, "namespace/"+f.ns); code != 0 {
		t.Fatalf("a provisioned tenant: exit %d, %+v", code, links)
	}

	// The fixture's WatchRule mirrors ConfigMaps into GitTarget mirror, whose cursors are not durable.
	links, code = f.traceJSON(t, f.kubeconfig, "configmap/settings")
	target := linkNamed(links, "target")
	if code != 1 || linkNamed(links, "rule").Object != "WatchRule/configmaps" || target.Object != "GitTarget/"+f.ns+"/mirror" ||
		!strings.Contains(target.Message, "clusters/prod/"+f.ns+"/") || !strings.Contains(target.Message, "configmaps/settings.yaml") || target.State != inspect.StateFailing {
		t.Fatalf("a mirrored ConfigMap: exit %d, %+v", code, links)
	}
	var gt mirrorv1.GitTarget
	must(t, f.c.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "mirror"}, &gt))
	gt.Status.Conditions = gt.Status.Conditions[:1]
	must(t, f.c.Client.Status().Update(ctx, &gt))
	if links, code := f.traceJSON(t, f.kubeconfig, "configmaps/settings"); code != 0 {
		t.Fatalf("a mirrored ConfigMap, target healthy: exit %d, %+v", code, links)
	}
	if links, code := f.traceJSON(t, f.kubeconfig, "deployments.apps/web"); code != 1 || !strings.Contains(linkNamed(links, "rule").Message, "no rule") {
		t.Errorf("an object no rule mirrors: exit %d, %+v", code, links)
	}
	if _, _, err := f.run(t, "trace", "widgets/x"); err == nil || !strings.Contains(err.Error(), "not a resource the API server serves") {
		t.Errorf("an unknown resource: %v", err)
	}
}
