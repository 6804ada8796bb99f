package inject_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// TestDeleteProtectionReadsABoundedList: with more workloads using a Decofile than the delete
// protection reads of a kind (20), deleting it is still denied, naming 20 and saying there are
// more: the protection never lists a namespace's workloads whole.
func TestDeleteProtectionReadsABoundedList(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	tn := c.Tenant(t, "inject-protect-many", nil)
	d := decofile(t, c.Client, tn.Namespace, "site", "", "", decov1.FormatJSON)
	for i := range 21 {
		if err := tn.Client.Create(ctx, deployment(tn.Namespace, fmt.Sprintf("site-%02d", i), map[string]string{decov1.AnnotationInject: "site"}, nil, "app")); err != nil {
			t.Fatal(err)
		}
	}
	err := tn.Client.Delete(ctx, d.DeepCopy())
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "deployment.apps/site-00") || !strings.Contains(err.Error(), " and more;") {
		t.Fatalf("delete while 21 Deployments use it: err = %v, want denied naming them and saying there are more", err)
	}
	if n := strings.Count(err.Error(), "deployment.apps/"); n != 20 {
		t.Errorf("denial names %d Deployments, want 20", n)
	}
}
