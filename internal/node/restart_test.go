package node_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/node"
	"github.com/siteops/siteops/internal/testenv"
)

// TestNodeKubeletRestartKeepsPods restarts the kubelet of a node running a pod and checks that
// RestartKubelet returns once a new kubelet has reported the Node Ready, that a pod made after
// it starts, and that the pod from before kept its container (same ID, no restart), serves
// and is Ready.
func TestNodeKubeletRestartKeepsPods(t *testing.T) {
	c, n, image, first := nodeWithProbedPod(t, "kubelet-restart", "before")
	ctx := context.Background()
	ns, before := first.Namespace, first.DeepCopy()
	restartsLogged := strings.Count(readFile(t, filepath.Join(n.Dir, "node.log")), "starting it again")

	called := time.Now()
	if err := n.RestartKubelet(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("kubelet restarted and the Node Ready in %s", time.Since(called).Round(time.Millisecond))
	if got := strings.Count(readFile(t, filepath.Join(n.Dir, "node.log")), "starting it again"); got != restartsLogged+1 {
		t.Fatalf("the node logged %d kubelet restarts, want %d", got, restartsLogged+1)
	}
	var node corev1.Node
	if err := c.Client.Get(ctx, client.ObjectKey{Name: n.Name}, &node); err != nil {
		t.Fatal(err)
	}
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady && (cond.Status != corev1.ConditionTrue || !cond.LastHeartbeatTime.After(called.Truncate(time.Second))) {
			t.Fatalf("RestartKubelet returned with Ready %s by a heartbeat at %s, before the restart began (%s)",
				cond.Status, cond.LastHeartbeatTime.Format(time.RFC3339), called.Format(time.RFC3339Nano))
		}
	}

	// A pod made now starts: the new kubelet runs pods. It has synced the pods it found at
	// start (the one from before) before it sees this one.
	after := probedPod(ns, "after", n.Name, image)
	if err := c.Client.Create(ctx, after); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitPodReady(t, c, after)
	t.Logf("a new pod Ready %s after it was made", time.Since(start).Round(time.Millisecond))

	again := waitPodReady(t, c, before)
	was, is := first.Status.ContainerStatuses[0], again.Status.ContainerStatuses[0]
	if is.ContainerID != was.ContainerID || is.RestartCount != 0 {
		t.Fatalf("the pod from before the restart has container %s (%d restarts), had %s", is.ContainerID, is.RestartCount, was.ContainerID)
	}
	// Ready by the kubelet's probe; from the machine it may take the routes a moment on a loaded
	// machine, so the pod is asked until it answers.
	testenv.Eventually(t, 30*time.Second, func() error {
		_, err := get("http://" + again.Status.PodIP + ":8000/.decofile")
		return err
	})
}

// nodeWithProbedPod starts a node running the site image and a probed pod of it, name, in a
// namespace of its own, and returns them once the pod is Ready.
func nodeWithProbedPod(t *testing.T, nsPrefix, name string) (*testenv.Cluster, *node.Node, string, *corev1.Pod) {
	t.Helper()
	c := testenv.APIServer(t)
	testenv.RequireNode(t)
	site := testenv.ImageArchive(t, "siteops-site")
	n := c.Node(t, site)
	image := testenv.ImageRef(t, site)
	pod := probedPod(c.PodNamespace(t, nsPrefix), name, n.Name, image)
	if err := c.Client.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	return c, n, image, waitPodReady(t, c, pod)
}

// probedPod is the site image with a readiness probe, on the given node.
func probedPod(ns, name, nodeName, image string) *corev1.Pod {
	p := sitePod(ns, nodeName, image)
	p.Name = name
	p.Spec.Containers[0].Env = nil
	p.Spec.Containers[0].VolumeMounts, p.Spec.Volumes = nil, nil
	p.Spec.Containers[0].ReadinessProbe = &corev1.Probe{PeriodSeconds: 1,
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/.decofile", Port: intstr.FromInt32(8000)}}}
	return p
}

// waitPodReady waits until the pod runs one container and is Ready, and returns it.
func waitPodReady(t *testing.T, c *testenv.Cluster, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	var got corev1.Pod
	testenv.Eventually(t, 90*time.Second, func() error {
		if err := c.Client.Get(context.Background(), client.ObjectKeyFromObject(pod), &got); err != nil {
			return err
		}
		if got.Status.Phase != corev1.PodRunning || len(got.Status.ContainerStatuses) != 1 || !got.Status.ContainerStatuses[0].Ready {
			return fmt.Errorf("pod %s: %s, containers %+v", got.Name, got.Status.Phase, got.Status.ContainerStatuses)
		}
		return nil
	})
	return &got
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
