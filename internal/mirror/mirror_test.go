package mirror_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/mirror"
	"github.com/siteops/siteops/internal/mirror/metrics"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

func cmRule() mirrorv1alpha1.ResourceRule {
	return mirrorv1alpha1.ResourceRule{APIGroups: []string{""}, Resources: []string{"configmaps"}}
}

func TestMirrorsChangesIntoGit(t *testing.T) {
	c := testenv.APIServer(t)
	redis := testenv.Redis(t, servers.RedisOptions{})
	f := newFixture(t, c)
	ctx := context.Background()
	runManager(t, c, mirror.Options{RedisAddr: redis.Addr, RedisKeyPrefix: "t1"}, "")

	f.target(t, "main", "clusters/dev", 300*time.Millisecond, "")
	// Every core resource (Secrets, Pods, Events, Endpoints excluded) plus the Widget CRD.
	f.watchRule(t, "core", "main", mirrorv1alpha1.ResourceRule{APIGroups: []string{""}, Resources: []string{"*"}},
		mirrorv1alpha1.ResourceRule{APIGroups: []string{"example.com"}, Resources: []string{"widgets"}})
	f.create(t, &mirrorv1alpha1.ClusterWatchRule{
		ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-pc"},
		Spec: mirrorv1alpha1.ClusterWatchRuleSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: "main", Namespace: f.ns},
			Rules: []mirrorv1alpha1.ResourceRule{{APIGroups: []string{"scheduling.k8s.io"}, Resources: []string{"priorityclasses"}}}},
	})
	t.Cleanup(func() {
		_ = c.Client.Delete(ctx, &mirrorv1alpha1.ClusterWatchRule{ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-pc"}})
	})

	base := "clusters/dev/" + f.ns
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: f.ns, Labels: map[string]string{"team": "web"}}, Data: map[string]string{"color": "blue"}}
	f.create(t, cm)
	f.create(t, newSecret(f.ns, "db", map[string]string{"password": "hunter2"}))
	f.create(t, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: f.ns}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}})
	pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-high"}, Value: 1000}
	f.create(t, pc)
	t.Cleanup(func() { _ = c.Client.Delete(ctx, pc) })
	widget := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": f.ns},
		"spec":     map[string]any{"size": int64(3), "futureField": map[string]any{"nested": "kept"}},
	}}
	f.create(t, widget)

	f.waitFile(t, base+"/core/configmaps/app.yaml", "color: blue")
	f.waitFile(t, "clusters/dev/_cluster/scheduling.k8s.io/priorityclasses/"+f.ns+"-high.yaml", "value: 1000")
	f.waitFile(t, base+"/example.com/widgets/w.yaml", "nested: kept")
	got := f.file(base + "/core/configmaps/app.yaml")
	want := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  labels:\n    team: web\n  name: app\n  namespace: %s\ndata:\n  color: blue", f.ns)
	if got != want {
		t.Fatalf("app.yaml:\n%s\nwant:\n%s", got, want)
	}
	for _, p := range f.files(t, "clusters/dev") {
		if strings.Contains(p, "/secrets/") || strings.Contains(p, "/pods/") || strings.Contains(p, "/events/") {
			t.Errorf("excluded resource written: %s", p)
		}
	}
	// The status is written after the push it reports, so it may trail the files by a moment.
	var gt *mirrorv1alpha1.GitTarget
	testenv.Eventually(t, 30*time.Second, func() error {
		gt = f.waitCondition(t, "main", mirrorv1alpha1.ConditionReady, metav1.ConditionTrue, "Mirroring")
		if gt.Status.SkippedSecrets != 1 || gt.Status.LastPushedCommit == "" || gt.Status.WatchedStreams < 3 {
			return fmt.Errorf("status: %+v", gt.Status)
		}
		if h := gt.Status.History; len(h) == 0 || h[0].Commit != gt.Status.LastPushedCommit || h[0].Result != "Pushed" {
			return fmt.Errorf("history %+v does not start with the last push %s", h, gt.Status.LastPushedCommit)
		}
		return nil
	})
	var excluded []string
	for _, e := range gt.Status.Excluded {
		excluded = append(excluded, e.Resource)
	}
	for _, want := range []string{"secrets", "pods", "events", "endpoints"} {
		if !slices.Contains(excluded, want) {
			t.Errorf("excluded %v lacks %s", excluded, want)
		}
	}
	f.waitCondition(t, "main", mirrorv1alpha1.ConditionCursorsDurable, metav1.ConditionTrue, "Recorded")

	// An update commits with the single-change message.
	before := f.commits()
	patch(t, c, cm, func() { cm.Data["color"] = "green" })
	f.waitFile(t, base+"/core/configmaps/app.yaml", "color: green")
	if msg := f.git(t, "log", "-1", "--format=%an <%ae>|%s", "main"); msg != fmt.Sprintf("Mirror Bot <mirror@example.com>|[UPDATE] v1/configmaps/%s/app", f.ns) {
		t.Errorf("commit = %q", msg)
	}
	if n := f.commits(); n != before+1 {
		t.Errorf("%d commits after one update, want %d", n, before+1)
	}

	// Changes that sanitize away (tool annotations, status) make no commit: the next real change
	// is the only one in the next commit.
	before = f.commits()
	patch(t, c, cm, func() {
		cm.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}"}
	})
	widget.Object["status"] = map[string]any{"phase": "Ready"}
	if err := c.Client.Status().Update(ctx, widget); err != nil {
		t.Fatal(err)
	}
	f.create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "marker", Namespace: f.ns}})
	f.waitFile(t, base+"/core/configmaps/marker.yaml", "marker")
	if n := f.commits(); n != before+1 {
		t.Errorf("%d commits, want %d (only the marker)", n, before+1)
	}
	if changed := f.git(t, "show", "--name-only", "--format=", "main"); changed != base+"/core/configmaps/marker.yaml" {
		t.Errorf("last commit changed %q", changed)
	}

	// Deletes remove files; an object being finalized counts as deleted.
	if err := c.Client.Delete(ctx, cm); err != nil {
		t.Fatal(err)
	}
	f.waitNoFile(t, base+"/core/configmaps/app.yaml")
	if msg := f.git(t, "log", "-1", "--format=%s", "main"); msg != fmt.Sprintf("[DELETE] v1/configmaps/%s/app", f.ns) {
		t.Errorf("delete commit = %q", msg)
	}
	fin := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "finalized", Namespace: f.ns, Finalizers: []string{"example.com/hold"}}}
	f.create(t, fin)
	f.waitFile(t, base+"/core/configmaps/finalized.yaml", "finalized")
	if err := c.Client.Delete(ctx, fin); err != nil {
		t.Fatal(err)
	}
	f.waitNoFile(t, base+"/core/configmaps/finalized.yaml")
	patch(t, c, fin, func() { fin.Finalizers = nil })

	// The metrics saw it all.
	for name, v := range map[string]float64{
		"commits":         testutil.ToFloat64(metrics.Commits),
		"pushes success":  testutil.ToFloat64(metrics.Pushes.WithLabelValues("success")),
		"events added":    testutil.ToFloat64(metrics.Events.WithLabelValues("added")),
		"events modified": testutil.ToFloat64(metrics.Events.WithLabelValues("modified")),
		"events deleted":  testutil.ToFloat64(metrics.Events.WithLabelValues("deleted")),
		"cursor writes":   testutil.ToFloat64(metrics.CursorWrites.WithLabelValues("success")),
	} {
		if v == 0 {
			t.Errorf("metric %s is 0", name)
		}
	}
	if n := testutil.CollectAndCount(metrics.PushLatency); n != 1 {
		t.Errorf("latency histogram has %d series", n)
	}

	// Rule status names what it resolved to and what it left out.
	var rule mirrorv1alpha1.WatchRule
	testenv.Eventually(t, 10*time.Second, func() error {
		if err := c.Client.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: "core"}, &rule); err != nil {
			return err
		}
		if !slices.Contains(rule.Status.Resources, "configmaps/v1") || !slices.Contains(rule.Status.Resources, "widgets.example.com/v1") {
			return fmt.Errorf("rule resources %v", rule.Status.Resources)
		}
		return nil
	})
}

func patch(t testing.TB, c *testenv.Cluster, obj client.Object, mutate func()) {
	t.Helper()
	old := obj.DeepCopyObject().(client.Object)
	mutate()
	if err := c.Client.Patch(context.Background(), obj, client.MergeFrom(old)); err != nil {
		t.Fatalf("patch %s: %v", obj.GetName(), err)
	}
}

func TestDeletesIgnoreKeepsFiles(t *testing.T) {
	c := testenv.APIServer(t)
	f := newFixture(t, c)
	runManager(t, c, mirror.Options{}, "")
	f.target(t, "keep", "", 100*time.Millisecond, mirrorv1alpha1.DeletesIgnore)
	f.watchRule(t, "cms", "keep", cmRule())
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kept", Namespace: f.ns}, Data: map[string]string{"k": "v"}}
	f.create(t, cm)
	path := f.ns + "/core/configmaps/kept.yaml"
	f.waitFile(t, path, "k: v")
	if err := c.Client.Delete(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
	f.create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "marker", Namespace: f.ns}})
	f.waitFile(t, f.ns+"/core/configmaps/marker.yaml", "marker")
	if f.file(path) == "" {
		t.Fatal("deletes: ignore removed the file")
	}
	// Without Redis the target says its cursors are not durable.
	f.waitCondition(t, "keep", mirrorv1alpha1.ConditionCursorsDurable, metav1.ConditionFalse, "NotConfigured")
}

func TestTargetProblemsAreReported(t *testing.T) {
	c := testenv.APIServer(t)
	f := newFixture(t, c)
	runManager(t, c, mirror.Options{}, "")
	gt := &mirrorv1alpha1.GitTarget{
		ObjectMeta: metav1.ObjectMeta{Name: "wrong-branch", Namespace: f.ns},
		Spec:       mirrorv1alpha1.GitTargetSpec{ProviderRef: ref(f.provider), Branch: "release"},
	}
	f.create(t, gt)
	f.waitCondition(t, "wrong-branch", mirrorv1alpha1.ConditionReady, metav1.ConditionFalse, "BranchNotAllowed")
	f.create(t, &mirrorv1alpha1.GitTarget{
		ObjectMeta: metav1.ObjectMeta{Name: "no-provider", Namespace: f.ns},
		Spec:       mirrorv1alpha1.GitTargetSpec{ProviderRef: ref("missing"), Branch: "main"},
	})
	f.waitCondition(t, "no-provider", mirrorv1alpha1.ConditionReady, metav1.ConditionFalse, "ProviderNotFound")
	f.create(t, &mirrorv1alpha1.GitProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "ssh", Namespace: f.ns},
		Spec: mirrorv1alpha1.GitProviderSpec{URL: "ssh://git@127.0.0.1/r.git", SecretRef: refPtr("ssh-key"),
			Committer: mirrorv1alpha1.Committer{Name: "m", Email: "m@example.com"}},
	})
	f.create(t, newSecret(f.ns, "ssh-key", map[string]string{"identity": "not-a-key"}))
	f.create(t, &mirrorv1alpha1.GitTarget{
		ObjectMeta: metav1.ObjectMeta{Name: "ssh", Namespace: f.ns},
		Spec:       mirrorv1alpha1.GitTargetSpec{ProviderRef: ref("ssh"), Branch: "main"},
	})
	gtSSH := f.waitCondition(t, "ssh", mirrorv1alpha1.ConditionReady, metav1.ConditionFalse, "CredentialsInvalid")
	if !strings.Contains(readyMessage(gtSSH), "known_hosts") {
		t.Errorf("ssh without known_hosts: %q", readyMessage(gtSSH))
	}
	// Invalid paths are refused by the API.
	bad := &mirrorv1alpha1.GitTarget{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: f.ns},
		Spec: mirrorv1alpha1.GitTargetSpec{ProviderRef: ref(f.provider), Branch: "main", Path: "a/../b"}}
	if err := c.Client.Create(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "..") {
		t.Errorf("path with .. accepted: %v", err)
	}
	bad.Spec.Path = "/abs"
	if err := c.Client.Create(context.Background(), bad); err == nil {
		t.Error("absolute path accepted")
	}
}

func readyMessage(gt *mirrorv1alpha1.GitTarget) string {
	for _, c := range gt.Status.Conditions {
		if c.Type == mirrorv1alpha1.ConditionReady {
			return c.Message
		}
	}
	return ""
}
