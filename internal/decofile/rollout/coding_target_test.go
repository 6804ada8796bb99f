package rollout

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// The notifier learns what a pod accepts under its UID, and reads its accept-encoding annotation.
func TestTargetCarriesUIDAndAcceptEncoding(t *testing.T) {
	p := running(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "0b7c-uid",
		Annotations: map[string]string{decov1alpha1.AnnotationReloadAcceptEncoding: "br,gzip"}}})
	got := Target(p)
	if got.UID != "0b7c-uid" || got.AcceptEncoding != "br,gzip" {
		t.Fatalf("target %+v", got)
	}
}
