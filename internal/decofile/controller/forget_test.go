package controller

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/siteops/siteops/internal/scheme"
)

// TestDeletedDecofilesAreForgotten: what the controller remembers per Decofile (the commit
// rejected for good, its last status write) goes when the Decofile is gone.
func TestDeletedDecofilesAreForgotten(t *testing.T) {
	c := fake.NewClientBuilder().WithScheme(scheme.New()).Build()
	r := &Reconciler{client: c, reader: c}
	key := types.NamespacedName{Namespace: "tenant-a", Name: "gone"}
	r.rejected.Store(key, rejectedCommit{generation: 1, sha: "abc"})
	r.written.Wrote(key, "42")
	if _, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.rejected.Load(key); ok {
		t.Error("the rejected commit of a deleted Decofile is still remembered")
	}
	if r.written.Len() != 0 {
		t.Error("the last status write of a deleted Decofile is still remembered")
	}
}
