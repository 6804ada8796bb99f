package rollout_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/rollout"
)

// TestV011PodKeepsItsLiteralToken: a pod injected by v0.11 (found by app.deco/deploymentId, a
// literal DECO_RELEASE_RELOAD_TOKEN in its spec, checked by the runtime) is notified with that
// token until its workload is re-admitted, next to a siteops pod that gets the Secret's token:
// the rollout after adoption succeeds instead of failing with 401.
func TestV011PodKeepsItsLiteralToken(t *testing.T) {
	e := newEnv(t, rollout.Options{})
	df := e.decofile("shop", false)
	current := e.sitePod("shop-a", podOpts{labels: labelled(df)})
	legacy := e.sitePod("shop-v011", podOpts{labels: map[string]string{decov1alpha1.LabelDeploymentID: "shop"}, token: "minted-by-v011",
		env: []corev1.EnvVar{{Name: decov1alpha1.EnvReloadToken, Value: "minted-by-v011"}}})

	content := []byte(`{"site":{"name":"Shop"}}`)
	e.store(df, content, "0123456789abcdef0123456789abcdef01234567", 1731598481, true)
	e.podsNotified(df, metav1.ConditionTrue, "Successfully notified all pods", 20*time.Second)
	for _, p := range []*sitePod{current, legacy} {
		if s := p.rt.Current(); s.Hash != encode.Hash(content) {
			t.Errorf("%s serves %s", p.pod.Name, s.Hash)
		}
	}
}
