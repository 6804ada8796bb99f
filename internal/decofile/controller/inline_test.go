package controller_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/encode/sample"
)

func TestInlineSmallThenLarge(t *testing.T) {
	e := start(t)
	ns := e.c.Namespace(t, "inline", nil)
	small := map[string]string{"Header.json": `{"title":"Tom & Jerry <b>"}`, "pages-Home": `{"path":"/","z":1,"a":2}`}
	e.create(t, &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: ns},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: inline(small)}})

	df := e.waitReady(t, ns, "site", metav1.ConditionTrue, decov1.ReasonSucceeded, nil)
	want := mergedOf(t, small)
	cm := e.configMap(t, ns, "site")
	if got := cm.Data[decov1.KeyJSON]; got != string(want) {
		t.Fatalf("decofile.json:\n got %s\nwant %s", got, want)
	}
	if !strings.Contains(cm.Data[decov1.KeyJSON], `"Tom & Jerry <b>"`) {
		t.Fatal("HTML characters were escaped")
	}
	ts, err := strconv.ParseInt(cm.Data[decov1.KeyTimestamp], 10, 64)
	if err != nil || ts != df.Status.Timestamp || time.Since(time.Unix(ts, 0)) > time.Minute {
		t.Fatalf("timestamp.txt %q, status %d", cm.Data[decov1.KeyTimestamp], df.Status.Timestamp)
	}
	if _, ok := cm.Data[decov1.KeyBin]; ok {
		t.Fatal("a small Decofile got decofile.bin")
	}
	if cm.Labels[decov1.LabelManagedBy] != "siteops" || cm.Labels[decov1.LabelDecofile] != "site" {
		t.Fatalf("labels %v", cm.Labels)
	}
	if o := metav1.GetControllerOf(cm); o == nil || o.UID != df.UID || o.Kind != "Decofile" {
		t.Fatalf("ConfigMap owner %+v", o)
	}
	s := df.Status
	if s.ContentHash != encode.Hash(want) || s.Format != decov1.FormatJSON || s.RawBytes != int64(len(want)) ||
		s.StoredBytes != int64(len(want)) || s.ConfigMapName != "decofile-site" || s.SourceType != decov1.SourceInline ||
		s.LastUpdated == nil || s.GitHubCommit != "" || s.NotifiedHash != s.ContentHash {
		t.Fatalf("status %+v", s) // no pod to tell: the rollout is recorded with the content
	}
	if c := ready(df); c.ObservedGeneration != df.Generation || !strings.Contains(c.Message, "decofile.json") {
		t.Fatalf("Ready %+v", c)
	}
	e.hasEvent(t, ns, "site", corev1.EventTypeNormal, "Stored", "decofile.json")

	// Large: above the threshold → decofile.bin, and a strictly newer timestamp even within the same second.
	large := map[string]string{}
	for n, b := range sample.Generate(sample.Options{Seed: 7, Blocks: 20, TargetBytes: 300 << 10}) {
		large[n] = string(b)
	}
	e.update(t, ns, "site", func(d *decov1.Decofile) { d.Spec.Inline = inline(large) })
	wantLarge := mergedOf(t, large)
	df2 := e.waitReady(t, ns, "site", metav1.ConditionTrue, decov1.ReasonSucceeded, nil)
	cm = e.configMap(t, ns, "site")
	if _, ok := cm.Data[decov1.KeyJSON]; ok {
		t.Fatal("decofile.json left next to decofile.bin")
	}
	got, err := encode.Decode(decov1.FormatBin, cm.Data[decov1.KeyBin], 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(wantLarge) {
		t.Fatal("decofile.bin does not decode to the merged JSON")
	}
	s2 := df2.Status
	if s2.Format != decov1.FormatBin || s2.ContentHash != encode.Hash(wantLarge) || s2.RawBytes != int64(len(wantLarge)) ||
		s2.StoredBytes != int64(len(cm.Data[decov1.KeyBin])) || s2.Timestamp <= s.Timestamp ||
		cm.Data[decov1.KeyTimestamp] != strconv.FormatInt(s2.Timestamp, 10) || !s2.LastUpdated.After(s.LastUpdated.Add(-time.Second)) {
		t.Fatalf("status after the large update %+v (before: %+v)", s2, s)
	}
}

// TestPrinterColumns reads the Decofile the way `kubectl get` does (the API server's Table
// form) and checks every column's value, so a column whose JSONPath names no field fails.
func TestPrinterColumns(t *testing.T) {
	e := start(t)
	ns := e.c.Namespace(t, "columns", nil)
	org, repo := "acme", "columns-"+ns
	sha := e.gh.Push(org, repo, "main", map[string]string{".deco/blocks/a.json": `{"v":1}`})
	e.create(t, githubDecofile(ns, org, repo, "main", ""))
	df := e.waitReady(t, ns, "site", metav1.ConditionTrue, decov1.ReasonSucceeded, nil)
	testenv_eventually(t, func() error { // play the rollout controller
		cur := e.get(t, ns, "site")
		old := cur.DeepCopy()
		meta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{Type: decov1.ConditionPodsNotified, Status: metav1.ConditionFalse, Reason: decov1.ReasonNotificationFailed, Message: "x"})
		return e.c.Client.Status().Patch(context.Background(), cur, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{}))
	})

	rows := e.c.TableRows(t, "/apis/deco.sites/v1alpha1/namespaces/"+ns+"/decofiles/site")
	if len(rows) != 1 {
		t.Fatalf("%d rows", len(rows))
	}
	cells := rows[0]
	want := map[string]string{
		"Name": "site", "Source": "github", "Target": "configmap", "Commit": sha[:7], "Format": "json",
		"Size": strconv.FormatInt(df.Status.StoredBytes, 10), "Ready": "True", "Notified": "False",
	}
	for col, v := range want {
		if got, ok := cells[col]; !ok || got != v {
			t.Errorf("column %s = %q (present %v), want %q", col, got, ok, v)
		}
	}
	if age := cells["Age"]; !regexp.MustCompile(`^[0-9]+[smh]`).MatchString(age) {
		t.Errorf("column Age = %q", age)
	}
}

// TestNoWriteWhenUnchanged: a reconcile that finds everything in place writes neither the
// ConfigMap nor the status; and a spec change that does not change the content updates
// observedGeneration only (same timestamp, no new lastUpdated).
func TestNoWriteWhenUnchanged(t *testing.T) {
	e := start(t)
	ns := e.c.Namespace(t, "quiet", nil)
	values := map[string]string{"a": `{"v":1}`}
	e.create(t, &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: ns},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: inline(values)}})
	before := e.waitReady(t, ns, "site", metav1.ConditionTrue, "", nil)
	cmBefore := e.configMap(t, ns, "site")

	// The poke's reconcile is the one that reads the poked version; once it has, a requested
	// reconcile queued behind it (one Decofile is never reconciled twice at once) says when it
	// is over: the status names the request it handled.
	e.poke(t, ns, "site")
	poked := e.get(t, ns, "site")
	testenv_eventually(t, func() error {
		for _, r := range decofileReads.of(ns, "site") {
			if r.resourceVersion == poked.ResourceVersion {
				return nil
			}
		}
		return errorf("no reconcile has read the poked Decofile (resourceVersion %s) yet", poked.ResourceVersion)
	})
	after := e.handled(t, ns, "site", requestReconcile(t, e.c.Client, ns, "site"))
	// Neither reconcile found anything to do: the only status change is the handled request.
	want := poked.Status.DeepCopy()
	want.LastHandledReconcileAt = after.Status.LastHandledReconcileAt
	if !equality.Semantic.DeepEqual(want, &after.Status) {
		t.Fatalf("status written on reconciles that changed nothing:\n%+v\n→\n%+v", poked.Status, after.Status)
	}
	if cm := e.configMap(t, ns, "site"); cm.ResourceVersion != cmBefore.ResourceVersion {
		t.Fatal("ConfigMap rewritten without a change")
	}

	e.update(t, ns, "site", func(d *decov1.Decofile) { d.Spec.Silent = true })
	df := e.waitReady(t, ns, "site", metav1.ConditionTrue, "", nil)
	if df.Status.Timestamp != before.Status.Timestamp || !df.Status.LastUpdated.Equal(before.Status.LastUpdated) {
		t.Fatalf("content unchanged but timestamp/lastUpdated moved: %+v → %+v", before.Status, df.Status)
	}
	if cm := e.configMap(t, ns, "site"); cm.ResourceVersion != cmBefore.ResourceVersion {
		t.Fatal("ConfigMap rewritten for a spec change that kept the content")
	}

	// A deleted ConfigMap is restored with the same content and timestamp.
	if err := e.c.Client.Delete(context.Background(), cmBefore); err != nil {
		t.Fatal(err)
	}
	testenv_eventuallyCM(t, e, ns, "site", func(cm *corev1.ConfigMap) bool {
		return cm.UID != cmBefore.UID && cm.Data[decov1.KeyJSON] == cmBefore.Data[decov1.KeyJSON] && cm.Data[decov1.KeyTimestamp] == cmBefore.Data[decov1.KeyTimestamp]
	})
}

// TestReloadSecretAndRolloutFields: the reload Secret is created once and never regenerated;
// the rollout controller's fields (notifiedHash, rollout, PodsNotified) survive content changes,
// and Ready follows them: new content stored while pods have yet to confirm it is RollingOut
// (kstatus InProgress), and Ready once they did (kstatus Current).
func TestReloadSecretAndRolloutFields(t *testing.T) {
	e := start(t)
	ns := e.c.Namespace(t, "secret", nil)
	e.create(t, &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: ns},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: inline(map[string]string{"a": `1`})}})
	df := e.waitReady(t, ns, "site", metav1.ConditionTrue, "", nil)

	var s corev1.Secret
	key := client.ObjectKey{Namespace: ns, Name: df.ReloadSecretName()}
	if err := e.c.Client.Get(context.Background(), key, &s); err != nil {
		t.Fatal(err)
	}
	if tok := string(s.Data[decov1.ReloadTokenKey]); len(tok) != 64 {
		t.Fatalf("reload token %q", tok)
	}
	if o := metav1.GetControllerOf(&s); o == nil || o.UID != df.UID {
		t.Fatalf("reload Secret owner %+v", o)
	}
	s.Data[decov1.ReloadTokenKey] = []byte("kept-by-operator-users")
	if err := e.c.Client.Update(context.Background(), &s); err != nil {
		t.Fatal(err)
	}

	// Play the rollout controller: confirm the content and record its condition.
	testenv_eventually(t, func() error {
		cur := e.get(t, ns, "site")
		old := cur.DeepCopy()
		cur.Status.NotifiedHash = cur.Status.ContentHash
		cur.Status.Rollout = &decov1.RolloutStatus{ID: "timestamp:1", Total: 3, Notified: 3}
		meta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{Type: decov1.ConditionPodsNotified, Status: metav1.ConditionTrue, Reason: decov1.ReasonNotificationSucceeded, Message: "ok"})
		return e.c.Client.Status().Patch(context.Background(), cur, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{}))
	})
	confirmed := e.get(t, ns, "site").Status.NotifiedHash

	e.update(t, ns, "site", func(d *decov1.Decofile) { d.Spec.Inline = inline(map[string]string{"a": `2`}) })
	got := e.waitReady(t, ns, "site", metav1.ConditionUnknown, decov1.ReasonRollingOut, func(d *decov1.Decofile) error {
		if d.Status.ContentHash == confirmed {
			return errorf("content hash not updated yet")
		}
		return nil
	})
	if got.Status.NotifiedHash != confirmed || got.Status.Rollout == nil || got.Status.Rollout.Notified != 3 ||
		meta.FindStatusCondition(got.Status.Conditions, decov1.ConditionPodsNotified) == nil {
		t.Fatalf("rollout fields clobbered: %+v", got.Status)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, decov1.ConditionReconciling); c == nil || c.Status != metav1.ConditionTrue || c.Reason != decov1.ReasonRollingOut {
		t.Fatalf("Reconciling while the pods have yet to confirm the content: %+v", c)
	}
	if res := kstatusOf(t, got); res.Status != status.InProgressStatus {
		t.Fatalf("stored, not delivered: kstatus %s (%s), want InProgress", res.Status, res.Message)
	}
	// The pods confirm it: Ready, nothing reconciling, Current.
	testenv_eventually(t, func() error {
		cur := e.get(t, ns, "site")
		old := cur.DeepCopy()
		cur.Status.NotifiedHash = cur.Status.ContentHash
		return e.c.Client.Status().Patch(context.Background(), cur, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{}))
	})
	delivered := e.waitReady(t, ns, "site", metav1.ConditionTrue, decov1.ReasonSucceeded, nil)
	if res := kstatusOf(t, delivered); res.Status != status.CurrentStatus || meta.FindStatusCondition(delivered.Status.Conditions, decov1.ConditionReconciling) != nil {
		t.Fatalf("delivered: kstatus %s (%s), conditions %+v", res.Status, res.Message, delivered.Status.Conditions)
	}

	if err := e.c.Client.Get(context.Background(), key, &s); err != nil {
		t.Fatal(err)
	}
	if string(s.Data[decov1.ReloadTokenKey]) != "kept-by-operator-users" {
		t.Fatal("an existing reload token was regenerated")
	}
	// Deleted → recreated with a fresh token, and the workloads injected with this Decofile
	// (labelled by the webhook) are restarted: their running pods hold the old token and would
	// answer every later push with 401. Other workloads are left alone.
	injected, other := workload(ns, "site-web", "site"), workload(ns, "unrelated", "other")
	e.create(t, injected)
	e.create(t, other)
	if err := e.c.Client.Delete(context.Background(), &s); err != nil {
		t.Fatal(err)
	}
	testenv_eventually(t, func() error {
		var again corev1.Secret
		if err := e.c.Client.Get(context.Background(), key, &again); err != nil {
			return err
		}
		if again.UID == s.UID || len(again.Data[decov1.ReloadTokenKey]) != 64 {
			return errorf("not recreated yet")
		}
		return nil
	})
	testenv_eventually(t, func() error {
		var d appsv1.Deployment
		if err := e.c.Client.Get(context.Background(), client.ObjectKeyFromObject(injected), &d); err != nil {
			return err
		}
		if d.Spec.Template.Annotations[controller.AnnotationRestartedAt] == "" {
			return errorf("deployment %s not restarted after the new token: %v", d.Name, d.Spec.Template.Annotations)
		}
		return nil
	})
	e.hasEvent(t, ns, "site", corev1.EventTypeWarning, controller.ReasonReloadTokenRecreated, "deployment/site-web")
	testenv_eventually(t, func() error { // done: nothing left pending on the new Secret
		var again corev1.Secret
		if err := e.c.Client.Get(context.Background(), key, &again); err != nil {
			return err
		}
		if v, ok := again.Annotations[controller.AnnotationRestartPending]; ok {
			return errorf("restart still pending (%q)", v)
		}
		return nil
	})
	var d appsv1.Deployment
	if err := e.c.Client.Get(context.Background(), client.ObjectKeyFromObject(other), &d); err != nil || d.Spec.Template.Annotations[controller.AnnotationRestartedAt] != "" {
		t.Fatalf("a workload of another Decofile was restarted: %v %v", d.Spec.Template.Annotations, err)
	}
}

// workload is a Deployment as the injection webhook leaves it: labelled with its Decofile.
func workload(ns, name, decofile string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{decov1.LabelDecofile: decofile}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "site"}}}},
		},
	}
}

func TestS3TargetNotConfigured(t *testing.T) {
	e := start(t)
	ns := e.c.Namespace(t, "s3", nil)
	e.create(t, &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: ns},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Target: decov1.TargetS3, Inline: inline(map[string]string{"a": `1`})}})
	df := e.waitReady(t, ns, "site", metav1.ConditionFalse, controller.ReasonS3NotConfigured, nil)
	if !strings.Contains(ready(df).Message, "S3 target") {
		t.Fatalf("message %q", ready(df).Message)
	}
	e.hasEvent(t, ns, "site", corev1.EventTypeWarning, controller.ReasonS3NotConfigured, "s3")
}
