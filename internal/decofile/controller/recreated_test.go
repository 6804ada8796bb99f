package controller

import (
	"context"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/testenv"
)

// TestStatusNeverReachesARecreatedDecofile: a status decided for a Decofile that was deleted and
// created again under its name before the write is not written to the new one: the write of the
// old one's resourceVersion conflicts, and the retry finds another UID and stops.
func TestStatusNeverReachesARecreatedDecofile(t *testing.T) {
	c := testenv.APIServer(t)
	ctx := context.Background()
	ns := c.Namespace(t, "recreated", nil)
	create := func() *decov1.Decofile {
		df := &decov1.Decofile{
			ObjectMeta: metav1.ObjectMeta{Name: "site", Namespace: ns},
			Spec: decov1.DecofileSpec{Source: decov1.SourceInline,
				Inline: &decov1.InlineSource{Value: map[string]apiextensionsv1.JSON{"site": {Raw: []byte(`{"title":"a"}`)}}}},
		}
		if err := c.Client.Create(ctx, df); err != nil {
			t.Fatal(err)
		}
		return df
	}
	old := create()
	if err := c.Client.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	recreated := create()

	sw, err := NewStatusWriter(c.Config, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &Reconciler{client: c.Client, reader: c.Client, status: sw}
	next := old.Status.DeepCopy()
	next.ContentHash, next.ConfigMapName = "sha256:the-old-content", "decofile-site"
	meta.SetStatusCondition(&next.Conditions, metav1.Condition{Type: decov1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: decov1.ReasonSucceeded, Message: "stored"})
	if err := r.patchStatus(ctx, old, next, nil); err != nil {
		t.Fatalf("status of the deleted Decofile: %v", err)
	}
	var got decov1.Decofile
	if err := c.Client.Get(ctx, client.ObjectKeyFromObject(recreated), &got); err != nil {
		t.Fatal(err)
	}
	if got.UID != recreated.UID || got.Status.ContentHash != "" || got.Status.ConfigMapName != "" || len(got.Status.Conditions) != 0 {
		t.Fatalf("the recreated Decofile received the old one's status: %+v", got.Status)
	}
}
