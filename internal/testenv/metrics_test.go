package testenv_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/siteops/siteops/internal/testenv"
)

// Watches counts the watches of the resource named and no other: a Secret watch leaves the
// ConfigMap count as it was, a ConfigMap watch adds one, and its end takes it away.
func TestWatchesCountsOnlyTheResourceNamed(t *testing.T) {
	c := testenv.APIServer(t)
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	before := c.Watches(t, "configmaps")
	secrets, err := cs.CoreV1().Secrets("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer secrets.Stop()
	configMaps, err := cs.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, func() error { return wantWatches(t, c, before+1) })
	configMaps.Stop()
	testenv.Eventually(t, 10*time.Second, func() error { return wantWatches(t, c, before) })
}

func wantWatches(t *testing.T, c *testenv.Cluster, want int) error {
	if got := c.Watches(t, "configmaps"); got != want {
		return fmt.Errorf("%d ConfigMap watches, want %d", got, want)
	}
	return nil
}
