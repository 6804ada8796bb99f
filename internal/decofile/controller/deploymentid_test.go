package controller_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/controller"
)

// TestDuplicateDeploymentIDReported: of two Decofiles of a namespace with one deploymentId
// (the second's name is the first's default deploymentId), the older is delivered and the
// newer is reported Ready=False DeploymentIDConflict, Stalled, with a Warning Event, and
// stores nothing; once the older one is gone the newer one is delivered.
func TestDuplicateDeploymentIDReported(t *testing.T) {
	e := start(t)
	ns := e.c.Namespace(t, "dupid", nil)
	e.create(t, &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: ns},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: inline(map[string]string{"a": `1`})}})
	e.waitReady(t, ns, "shop", metav1.ConditionTrue, decov1.ReasonSucceeded, nil)
	time.Sleep(1100 * time.Millisecond) // a later creationTimestamp (seconds)
	e.create(t, &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: "shop-copy", Namespace: ns},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, DeploymentID: "shop", Inline: inline(map[string]string{"a": `2`})}})

	df := e.waitReady(t, ns, "shop-copy", metav1.ConditionFalse, decov1.ReasonDeploymentIDConflict, nil)
	if msg := ready(df).Message; !strings.Contains(msg, `"shop"`) || !strings.Contains(msg, "Decofile shop,") {
		t.Fatalf("message %q names neither the deploymentId nor the holder", msg)
	}
	if !meta.IsStatusConditionTrue(df.Status.Conditions, decov1.ConditionStalled) || df.Status.ContentHash != "" {
		t.Fatalf("conflicting Decofile status %+v", df.Status)
	}
	e.hasEvent(t, ns, "shop-copy", corev1.EventTypeWarning, decov1.ReasonDeploymentIDConflict, "shop")
	var cm corev1.ConfigMap
	if err := e.c.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "decofile-shop-copy"}, &cm); !apierrors.IsNotFound(err) {
		t.Fatalf("ConfigMap of the conflicting Decofile: %v", err)
	}
	if holder := e.waitReady(t, ns, "shop", metav1.ConditionTrue, decov1.ReasonSucceeded, nil); holder.Status.ContentHash == "" {
		t.Fatal("the older Decofile lost its content")
	}

	// The holder goes: the other one is delivered without being touched.
	if err := e.c.Client.Delete(context.Background(), e.get(t, ns, "shop")); err != nil {
		t.Fatal(err)
	}
	e.waitReady(t, ns, "shop-copy", metav1.ConditionTrue, decov1.ReasonSucceeded, nil)
	if got := e.configMap(t, ns, "shop-copy").Data[decov1.KeyJSON]; got != `{"a":2}` {
		t.Fatalf("decofile.json %s", got)
	}
}

// TestDeploymentIDHolder: the oldest claim wins, ties broken by name; others with another
// deploymentId, and the Decofile itself, never hold it.
func TestDeploymentIDHolder(t *testing.T) {
	at := func(s int64) metav1.Time { return metav1.NewTime(time.Unix(s, 0)) }
	mk := func(name, id string, created int64) decov1.Decofile {
		return decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), CreationTimestamp: at(created)},
			Spec: decov1.DecofileSpec{DeploymentID: id}}
	}
	items := []decov1.Decofile{mk("c", "shop", 10), mk("b", "shop", 10), mk("shop", "", 20), mk("a", "other", 1), mk("z", "shop", 30)}
	for _, tc := range []struct {
		self, want string
	}{{"b", ""}, {"c", "b"}, {"shop", "b"}, {"z", "b"}, {"a", ""}} {
		var self *decov1.Decofile
		for i := range items {
			if items[i].Name == tc.self {
				self = &items[i]
			}
		}
		got := controller.DeploymentIDHolder(items, self)
		if name := func() string {
			if got == nil {
				return ""
			}
			return got.Name
		}(); name != tc.want {
			t.Errorf("holder for %s: %q, want %q", tc.self, name, tc.want)
		}
	}
}
