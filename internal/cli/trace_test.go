package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	mirrorv1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/inspect"
	"github.com/siteops/siteops/internal/mirror/sanitize"
	"github.com/siteops/siteops/internal/tenant/acl"
	"github.com/siteops/siteops/internal/tenant/provision"
	"github.com/siteops/siteops/internal/tenant/rollout"
	"github.com/siteops/siteops/internal/testenv"
)

// traceJSON runs trace -o json and returns its links and exit code.
func (f *getFixture) traceJSON(t *testing.T, kc, what string, args ...string) ([]inspect.Link, int) {
	t.Helper()
	out, _, err := runCLI(context.Background(), append([]string{"trace", what, "-o", "json", "--kubeconfig", kc}, args...)...)
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
		Behind: []decov1.PodBehind{{Name: "site-b", Reason: "HTTP 401: the pod refused the reload token", HTTPStatus: 401, Attempts: 3,
			ConfirmedHash: strings.Repeat("0123456789abcdef", 4)}},
		Confirmed: []decov1.ConfirmedContent{{ContentHash: d.Status.ContentHash, Pods: 1}, {ContentHash: strings.Repeat("0123456789abcdef", 4), Pods: 1}}}
	must(t, f.c.Client.Status().Update(ctx, &d))
	links, code := f.traceJSON(t, f.kubeconfig, "pod/site-b")
	pods := linkNamed(links, "pods")
	if code != 1 || pods.State != inspect.StateFailing || !strings.Contains(pods.Message, "pod site-b is behind: HTTP 401: the pod refused the reload token (HTTP 401 after 3 attempts); it still serves content 0123456789ab") {
		t.Fatalf("a pod behind: exit %d, pods link %+v", code, pods)
	}
	// The Decofile's own trace says how many pods hold which content, from the status alone.
	dlinks, _ := f.traceJSON(t, f.kubeconfig, "decofile/a-ready")
	if pods := linkNamed(dlinks, "pods"); !strings.Contains(pods.Message, "pods by content: 1 on the stored fedcba987654, 1 on 0123456789ab; behind: site-b") {
		t.Fatalf("the Decofile's pods link %+v", pods)
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
	if links, code := f.traceJSON(t, f.kubeconfig, "namespace/"+f.ns); code != 0 || linkNamed(links, "workloads").What != "" {
		t.Fatalf("a provisioned tenant: exit %d, %+v", code, links)
	}
	traceRotation(t, f)

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
	if links, code := f.traceJSON(t, f.kubeconfig, "configmaps/settings"); code != 0 || linkNamed(links, "commit").What != "" {
		t.Fatalf("a mirrored ConfigMap, target healthy: exit %d, %+v", code, links)
	}
	traceLastCommit(t, f)
	if links, code := f.traceJSON(t, f.kubeconfig, "deployments.apps/web"); code != 1 || !strings.Contains(linkNamed(links, "rule").Message, "no rule") {
		t.Errorf("an object no rule mirrors: exit %d, %+v", code, links)
	}
	if _, _, err := f.run(t, "trace", "widgets/x"); err == nil || !strings.Contains(err.Error(), "not a resource the API server serves") {
		t.Errorf("an unknown resource: %v", err)
	}
}

// traceRotation rotates the fixture tenant's password by hand (as the operator records it) and
// checks that the trace names the injected workload still running pods of the earlier one, and
// stops naming it once it rolled out with the current one.
func traceRotation(t *testing.T, f *getFixture) {
	ctx := context.Background()
	var sec corev1.Secret
	must(t, f.c.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: decov1.ValkeyACLSecretName}, &sec))
	sec.Data = map[string][]byte{decov1.ValkeyACLUsernameKey: []byte(provision.Username(f.ns)), decov1.ValkeyACLPasswordKey: []byte("the current password")}
	must(t, f.c.Client.Update(ctx, &sec))
	var ns corev1.Namespace
	must(t, f.c.Client.Get(ctx, client.ObjectKey{Name: f.ns}, &ns))
	ns.Annotations[provision.AnnotationRetiring] = acl.HashPassword("the earlier password")
	ns.Annotations[provision.AnnotationRetiringSince] = time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	must(t, f.c.Client.Update(ctx, &ns))

	cache := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "cache-user", Namespace: f.ns, Annotations: map[string]string{decov1.AnnotationValkeyACLInject: "true"}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "cache-user"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "cache-user"}, Annotations: map[string]string{rollout.AnnotationRevision: "of-the-earlier-password"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "app"}}},
			},
		},
	}
	must(t, f.c.Client.Create(ctx, cache))
	links, code := f.traceJSON(t, f.kubeconfig, "namespace/"+f.ns)
	if w := linkNamed(links, "workloads"); code != 1 || w.State != inspect.StateProgressing || !strings.Contains(w.Message, "Deployment/cache-user") || w.Since == nil {
		t.Fatalf("a rotation waiting for Deployment cache-user: exit %d, %+v", code, links)
	}
	out, _, _ := runCLI(ctx, "trace", "namespace/"+f.ns, "-o", "yaml", "--kubeconfig", f.kubeconfig)
	if strings.Contains(out, "the current password") {
		t.Fatalf("the trace printed the password:\n%s", out)
	}

	// Rolled out with the current password: nothing holds the earlier one any more.
	cache.Spec.Template.Annotations[rollout.AnnotationRevision] = provision.Revision(acl.User{Name: provision.Username(f.ns), Password: "the current password"})
	must(t, f.c.Client.Update(ctx, cache))
	cache.Status = appsv1.DeploymentStatus{ObservedGeneration: cache.Generation, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1, ReadyReplicas: 1}
	must(t, f.c.Client.Status().Update(ctx, cache))
	links, _ = f.traceJSON(t, f.kubeconfig, "namespace/"+f.ns)
	if w := linkNamed(links, "workloads"); w.State != inspect.StateReady {
		t.Fatalf("a rotation whose workloads rolled out: %+v", links)
	}
	must(t, f.c.Client.Get(ctx, client.ObjectKey{Name: f.ns}, &ns))
	delete(ns.Annotations, provision.AnnotationRetiring)
	delete(ns.Annotations, provision.AnnotationRetiringSince)
	must(t, f.c.Client.Update(ctx, &ns))
	must(t, f.c.Client.Delete(ctx, cache))
}

// traceLastCommit gives trace a clone of the mirror's repository: the ConfigMap's trace ends with
// the last commit of its file, the author that commit names and its attribution result.
func traceLastCommit(t *testing.T, f *getFixture) {
	repo := t.TempDir()
	testenv.Git(t, repo, "init", "-q", "-b", "main")
	testenv.CommitFiles(t, repo, "a first file", map[string]string{"clusters/prod/README.md": "the cluster's state"})
	if out, _, err := runCLI(context.Background(), "trace", "configmap/settings", "--repo", repo, "--kubeconfig", f.kubeconfig); !strings.Contains(out, "no commit on main") {
		t.Errorf("a repository without the file: %v\n%s", err, out)
	}
	file := sanitize.Path("clusters/prod", schema.GroupResource{Resource: "configmaps"}, f.ns, "settings")
	testenv.CommitFiles(t, repo, "[CREATE] v1/configmaps/settings", map[string]string{file: "color: blue\n"})
	must(t, os.WriteFile(filepath.Join(repo, filepath.FromSlash(file)), []byte("color: green\n"), 0o644))
	testenv.Git(t, repo, "commit", "-qa", "--author", "Jane Doe <jane@example.com>",
		"-m", "[UPDATE] v1/configmaps/settings\n\nAudit-ID: 5a0c\nAttribution: exact_user\nCluster: prod")
	head := testenv.Git(t, repo, "rev-parse", "HEAD")
	testenv.CommitFiles(t, repo, "another file", map[string]string{"clusters/prod/README.md": "not this object"})

	links, code := f.traceJSON(t, f.kubeconfig, "configmap/settings", "--repo", repo)
	c := linkNamed(links, "commit")
	if code != 0 || c.Object != "Commit/"+head[:12] || c.State != inspect.StateReady ||
		!strings.Contains(c.Message, "Jane Doe <jane@example.com>") || !strings.Contains(c.Message, "attribution exact_user") || c.Since == nil {
		t.Fatalf("the ConfigMap's last commit: exit %d, %+v", code, links)
	}
	if _, _, err := runCLI(context.Background(), "trace", "configmap/settings", "--repo", filepath.Join(repo, "missing"), "--kubeconfig", f.kubeconfig); err == nil || !strings.Contains(err.Error(), "--repo") {
		t.Errorf("a --repo that does not exist: %v", err)
	}
}
