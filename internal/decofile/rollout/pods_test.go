package rollout

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/notify"
)

func running(p *corev1.Pod) *corev1.Pod {
	p.Name = "p"
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7"}
	return p
}

func TestTarget(t *testing.T) {
	now := metav1.Now()
	cases := []struct {
		name  string
		pod   *corev1.Pod
		port  int32
		mount string
		skip  string
	}{
		{"no ports", running(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}}}), 8000, "/app/decofile", ""},
		{"named http port wins", running(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "app", Ports: []corev1.ContainerPort{{ContainerPort: 9000}}},
			{Name: "proxy", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}}}), 8080, "/app/decofile", ""},
		{"injected container's first port", running(&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "sidecar", Ports: []corev1.ContainerPort{{ContainerPort: 15000}}},
			{Name: "site", Env: []corev1.EnvVar{{Name: decov1alpha1.EnvRelease, Value: "file:///srv/deco/decofile.bin"}},
				Ports: []corev1.ContainerPort{{ContainerPort: 3000}}}}}}), 3000, "/srv/deco", ""},
		{"annotation overrides", running(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			decov1alpha1.AnnotationReloadPort: "7777", decov1alpha1.AnnotationMountPath: "/cfg"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}}}), 7777, "/cfg", ""},
		{"bad annotation ignored", running(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
			decov1alpha1.AnnotationReloadPort: "http"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{{ContainerPort: 8081}}}}}}), 8081, "/app/decofile", ""},
		{"pending", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}, 8000, "/app/decofile", "phase Pending"},
		{"no IP", &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}, 8000, "/app/decofile", "no pod IP"},
		{"host network", running(&corev1.Pod{Spec: corev1.PodSpec{HostNetwork: true, Containers: []corev1.Container{{Name: "app"}}}}), 8000, "/app/decofile",
			"uses the node's network (hostNetwork); the operator does not call node addresses"},
		{"deleting", func() *corev1.Pod { p := running(&corev1.Pod{}); p.DeletionTimestamp = &now; return p }(), 8000, "/app/decofile", "being deleted"},
	}
	for _, tc := range cases {
		got := Target(tc.pod)
		if got.Port != tc.port || got.MountPath != tc.mount || got.SkipReason != tc.skip {
			t.Errorf("%s: got port %d mount %q skip %q", tc.name, got.Port, got.MountPath, got.SkipReason)
		}
	}
}

func TestFailureReason(t *testing.T) {
	res := notify.Result{Progress: notify.Progress{Total: 6, Notified: 1, Failed: 4, Skipped: 1}, TimedOut: true, Pods: []notify.PodResult{
		{Name: "a", Outcome: notify.Notified},
		{Name: "b", Outcome: notify.Failed, Reason: "HTTP 401: the pod rejected the reload token"},
		{Name: "c", Outcome: notify.Failed, Reason: strings.Repeat("x", 500)},
		{Name: "d", Outcome: notify.Skipped, Reason: "phase Pending"},
		{Name: "e", Outcome: notify.Failed, Reason: "no answer within 2m30s"},
		{Name: "f", Outcome: notify.Failed, Reason: "connection refused"},
	}}
	got := failureReason(res, 5*time.Minute)
	for _, want := range []string{"rollout timeout (5m0s) reached; ", "4 of 6 pods failed (1 notified, 1 skipped): ",
		"b: HTTP 401: the pod rejected the reload token; c: xxx", "…; e: no answer within 2m30s; and 1 more"} {
		if !strings.Contains(got, want) {
			t.Errorf("reason %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "f: ") || len(got) > 600 {
		t.Errorf("reason not bounded: %q", got)
	}
}
