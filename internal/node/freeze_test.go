package node_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/testenv"
)

// TestNodeFreezePodHangsIt freezes a Ready pod: a request to it is accepted but never answered
// (a time-out, not a refusal), and the kubelet marks it NotReady; thawed, it answers again with
// the same container and is Ready.
func TestNodeFreezePodHangsIt(t *testing.T) {
	c, n, _, ready := nodeWithProbedPod(t, "freeze", "frozen")
	ctx := context.Background()
	pod := ready.DeepCopy()
	url := "http://" + ready.Status.PodIP + ":8000/.decofile"
	testenv.Eventually(t, 30*time.Second, func() error { _, err := get(url); return err })

	thaw, err := n.FreezePod(ready.UID)
	if err != nil {
		t.Fatal(err)
	}
	hung := &http.Client{Timeout: 2 * time.Second}
	res, err := hung.Get(url)
	if err == nil {
		res.Body.Close()
	}
	var ne net.Error
	if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("a frozen pod's answer: %v, want a time-out", err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		var got corev1.Pod
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
			return err
		}
		if got.Status.ContainerStatuses[0].Ready {
			return errors.New("the frozen pod is still Ready")
		}
		return nil
	})

	if err := thaw(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error { _, err := get(url); return err })
	again := waitPodReady(t, c, pod)
	if was, is := ready.Status.ContainerStatuses[0], again.Status.ContainerStatuses[0]; is.ContainerID != was.ContainerID || is.RestartCount != 0 {
		t.Fatalf("the thawed pod has container %s (%d restarts), had %s", is.ContainerID, is.RestartCount, was.ContainerID)
	}
	if _, err := n.FreezePod("no-such-pod"); err == nil {
		t.Fatal("froze a pod that does not run on the node")
	}
}
