package provision

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/shard"
)

// A shard's periodic resync lists only the tenants whose Namespace carries its label: the users
// of another shard's tenants are that shard's to check and heal.
func TestTenantListerKeepsToItsShard(t *testing.T) {
	tenant := func(name string, labels map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Finalizers: []string{Finalizer},
			Annotations: map[string]string{decov1.AnnotationValkeyACL: "true", AnnotationPasswordDigest: strings.Repeat("ab", 32)}}}
	}
	cl := fake.NewClientBuilder().WithObjects(tenant("sites-main", nil), tenant("sites-a", map[string]string{shard.Key: "a"}), tenant("sites-b", map[string]string{shard.Key: "b"})).Build()
	for selector, want := range map[string]string{"": "sites-a,sites-b,sites-main", shard.ForShard("a"): "sites-a", shard.MainSelector: "sites-main"} {
		sel, err := shard.Parse(selector)
		if err != nil {
			t.Fatal(err)
		}
		got, err := (&TenantLister{Namespaces: cl, Shard: sel}).List(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tn := range got {
			names = append(names, tn.Namespace)
		}
		if strings.Join(names, ",") != want {
			t.Errorf("selector %q lists %v, want %s", selector, names, want)
		}
	}
}
