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
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/inspect"
)

// injectedSite adds to the fixture's Decofile a-ready what delivery and injection make: its
// ConfigMap, its reload Secret, a Deployment labelled with it and two pods, one ready.
func (f *getFixture) injectedSite(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	const content = `{"home":{}}`
	var d decov1.Decofile
	must(t, f.c.Client.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "a-ready"}, &d))
	d.Status.StoredHash = encode.Hash([]byte(content))
	must(t, f.c.Client.Status().Update(ctx, &d))
	must(t, f.c.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "decofile-a-ready"},
		Data: map[string]string{decov1.KeyJSON: content, decov1.KeyTimestamp: "1"}}))
	must(t, f.c.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: d.ReloadSecretName()},
		Data: map[string][]byte{decov1.ReloadTokenKey: []byte("t")}}))
	site := map[string]string{"app": "site", decov1.LabelDecofile: "a-ready"}
	two := int32(2)
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "site", Labels: map[string]string{decov1.LabelDecofile: "a-ready"}},
		Spec: appsv1.DeploymentSpec{Replicas: &two, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "site"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: site},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "site"}}}}}}
	must(t, f.c.Client.Create(ctx, dep))
	dep.Status.Replicas, dep.Status.ReadyReplicas = 2, 1
	must(t, f.c.Client.Status().Update(ctx, dep))
	for i, ready := range []bool{true, false} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "site-" + string(rune('a'+i)), Labels: site},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "site"}}}}
		must(t, f.c.Client.Create(ctx, p))
		p.Status.Phase = corev1.PodRunning
		if ready {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		} else {
			p.Status.Phase = corev1.PodPending
		}
		must(t, f.c.Client.Status().Update(ctx, p))
	}
}

func TestTree(t *testing.T) {
	f := newGetFixture(t)
	f.injectedSite(t)
	out, _, err := f.run(t, "tree", "decofile/a-ready")
	must(t, err)
	golden(t, "tree.golden", out, f.ns)

	out, _, err = f.run(t, "tree", "df/a-ready", "-o", "json")
	must(t, err)
	var root inspect.Node
	must(t, json.Unmarshal([]byte(out), &root))
	if root.Healthy() || len(root.Children) != 3 || root.Children[2].Kind != "Deployment" || len(root.Children[2].Children) != 2 {
		t.Fatalf("tree %+v", root)
	}

	// Someone rewrites the ConfigMap by hand: the tree says the stored content is not the
	// operator's.
	var cm corev1.ConfigMap
	must(t, f.c.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "decofile-a-ready"}, &cm))
	cm.Data[decov1.KeyJSON] = `{"home":{"defaced":true}}`
	must(t, f.c.Client.Update(context.Background(), &cm))
	out, _, err = f.run(t, "tree", "decofile/a-ready")
	must(t, err)
	if !strings.Contains(out, "ConfigMap/decofile-a-ready  Failing  decofile.json differs from what the operator stored") {
		t.Errorf("a defaced ConfigMap is not shown:\n%s", out)
	}
	for _, bad := range []string{"pod/site-a", "decofile", "decofile/missing"} {
		if _, _, err := f.run(t, "tree", bad); err == nil {
			t.Errorf("tree %s: no error", bad)
		}
	}
}
