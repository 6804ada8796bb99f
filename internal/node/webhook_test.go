package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/decofile/inject"
	"github.com/siteops/siteops/internal/testenv"
)

// TestNodeWebhookThroughService runs the manager image as a pod behind a Service, in
// self-signed webhook mode: it patches the caBundle, and the API server calls its injection
// webhook through the Service (at the pod's IP, verifying the certificate it issued for the
// Service's name).
func TestNodeWebhookThroughService(t *testing.T) {
	c := testenv.APIServer(t)
	manager := testenv.ImageArchive(t, "siteops-manager")
	n := c.Node(t, manager)
	ctx := context.Background()
	ns := c.PodNamespace(t, "webhook")
	const service = "siteops-webhook-service"
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-manager"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "default", Namespace: ns}},
	}
	mutating, validating := inject.WebhookConfigurations(inject.ServiceClientConfig(ns, service, 443))
	labels := map[string]string{"app": "manager"}
	objs := []client.Object{crb, mutating, validating,
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: service, Namespace: ns}, Spec: corev1.ServiceSpec{
			Selector: labels, Ports: []corev1.ServicePort{{Port: 443, TargetPort: intstr.FromInt32(9443)}}}},
		&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "manager", Namespace: ns, Labels: labels},
			Spec: corev1.PodSpec{
				NodeName:                      n.Name,
				TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers: []corev1.Container{{
					Name: "manager", Image: testenv.ImageRef(t, manager), ImagePullPolicy: corev1.PullNever,
					Args: []string{"--leader-elect=false", "--metrics-bind-address=0", "--controllers=decofile",
						"--webhook-self-signed", "--webhook-cert-dir=/tmp/certs",
						"--webhook-cert-hosts=" + service + "." + ns + ".svc"},
				}},
			},
		},
	}
	for _, o := range objs {
		if err := c.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, o := range []client.Object{crb, mutating, validating} {
			_ = c.Client.Delete(context.Background(), o)
		}
	})
	start := time.Now()
	testenv.Eventually(t, 60*time.Second, func() error {
		var m admissionregistrationv1.MutatingWebhookConfiguration
		if err := c.Client.Get(ctx, client.ObjectKeyFromObject(mutating), &m); err != nil {
			return err
		}
		if len(m.Webhooks[0].ClientConfig.CABundle) == 0 {
			return fmt.Errorf("caBundle not patched yet")
		}
		return nil
	})
	t.Logf("the manager pod patched the caBundle after %s", time.Since(start).Round(time.Millisecond))

	w := &testenv.Warnings{}
	cfg := rest.CopyConfig(c.Config)
	cfg.WarningHandler = w
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The injection webhook answers a workload asking for a missing Decofile with a warning;
	// an unreachable webhook would refuse the workload (failurePolicy Fail).
	var lastErr error
	testenv.Eventually(t, 60*time.Second, func() error {
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "site-", Namespace: ns,
				Annotations: map[string]string{"deco.sites/decofile-inject": "missing"}},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To[int32](0),
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "site"}},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "site"}},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "site", Image: "siteops-site"}}}},
			},
		}
		if _, lastErr = cs.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); lastErr != nil {
			return lastErr
		}
		if !strings.Contains(w.All(), `Decofile "missing" not found`) {
			return fmt.Errorf("no warning from the webhook; warnings: %q", w.All())
		}
		return nil
	})
	t.Logf("the API server reached the webhook through its Service after %s", time.Since(start).Round(time.Millisecond))
}
