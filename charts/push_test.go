package charts_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// TestPushWebhook: with a push bind address, the manager declares the push port, gets its
// secret from the named Secret, a Service and (when asked) an Ingress reach exactly /hooks/push,
// and the NetworkPolicy opens the port; off by default. The GitHub App key is mounted and its
// flag points at it.
func TestPushWebhook(t *testing.T) {
	m := render(t, "siteops", namespace, values(t, `
flags:
  push-webhook-bind-address: ":9445"
  github-app-id: 12345
secrets:
  pushWebhookSecret: {name: hooks, key: secret}
  githubAppPrivateKey: {name: gh-app}
pushWebhook:
  ingress: {enabled: true, className: nginx, host: hooks.example.com}
`))
	d := m.deployment(t)
	if p := containerPort(d, "push"); p != 9445 {
		t.Fatalf("push container port = %d, want 9445", p)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "PUSH_WEBHOOK_SECRET" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef.Name == "hooks" && e.ValueFrom.SecretKeyRef.Key == "secret"
	}) {
		t.Fatalf("PUSH_WEBHOOK_SECRET not from Secret hooks: %+v", c.Env)
	}
	if !slices.Contains(c.Args, "--github-app-private-key-file=/etc/siteops/github-app/private-key.pem") || !slices.Contains(c.Args, "--github-app-id=12345") {
		t.Fatalf("GitHub App flags: %q", c.Args)
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(v corev1.VolumeMount) bool { return v.MountPath == "/etc/siteops/github-app" && v.ReadOnly }) ||
		!slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "gh-app" }) {
		t.Fatal("the GitHub App key Secret is not mounted read-only")
	}
	var svc corev1.Service
	if !m.get(t, "Service", "siteops-push", &svc) || !selects(svc.Spec.Selector, d.Spec.Template.Labels) || svc.Spec.Ports[0].TargetPort.String() != "push" {
		t.Fatalf("push Service missing or not reaching the push port: %+v", svc.Spec)
	}
	var ing networkingv1.Ingress
	if !m.get(t, "Ingress", "siteops-push", &ing) {
		t.Fatal("no push Ingress")
	}
	r := ing.Spec.Rules[0]
	if r.Host != "hooks.example.com" || len(r.HTTP.Paths) != 1 || r.HTTP.Paths[0].Path != "/hooks/push" || *r.HTTP.Paths[0].PathType != networkingv1.PathTypeExact ||
		r.HTTP.Paths[0].Backend.Service.Name != "siteops-push" {
		t.Fatalf("Ingress exposes more than the push path: %+v", r)
	}
	var np networkingv1.NetworkPolicy
	if !m.get(t, "NetworkPolicy", "siteops-manager", &np) || !slices.ContainsFunc(np.Spec.Ingress, func(r networkingv1.NetworkPolicyIngressRule) bool {
		return len(r.Ports) == 1 && r.Ports[0].Port.String() == "push"
	}) {
		t.Fatalf("the NetworkPolicy does not open the push port: %+v", np.Spec.Ingress)
	}

	off := render(t, "siteops", namespace, values(t, "{}"))
	if off.get(t, "Service", "siteops-push", nil) || off.get(t, "Ingress", "siteops-push", nil) || containerPort(off.deployment(t), "push") != -1 {
		t.Error("push events are off by default, yet a push Service, Ingress or port is rendered")
	}
	for _, a := range off.deployment(t).Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--github-app-private-key-file") && a != "--github-app-private-key-file=" {
			t.Errorf("no app key configured, yet %s", a)
		}
	}
}
