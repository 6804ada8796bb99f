package charts_test

import (
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/siteops/siteops/internal/mirror/commitrequest"
	"github.com/siteops/siteops/internal/mirror/ruleaccess"
)

const networkPolicyName = "siteops-manager"

// ingressPorts maps each port an ingress rule opens to the peers it opens it to (as YAML).
func ingressPorts(t *testing.T, np networkingv1.NetworkPolicy) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, r := range np.Spec.Ingress {
		if len(r.Ports) == 0 {
			t.Errorf("ingress rule %+v opens every port", r)
		}
		if len(r.From) == 0 {
			t.Errorf("ingress rule %+v admits every source", r)
		}
		for _, p := range r.Ports {
			for _, f := range r.From {
				b, _ := yaml.Marshal(f)
				out[p.Port.String()] = append(out[p.Port.String()], strings.TrimSpace(string(b)))
			}
		}
	}
	return out
}

// TestNetworkPolicy: by default the manager pods accept ingress only on the webhook port, only
// from the apiServer peers; the audit port joins it when attribution is on; the metrics and
// probe ports open only to their configured peers; networkPolicy.enabled false renders none.
func TestNetworkPolicy(t *testing.T) {
	t.Run("default", func(t *testing.T) {
		m := render(t, "siteops", namespace, nil)
		var np networkingv1.NetworkPolicy
		if !m.get(t, "NetworkPolicy", networkPolicyName, &np) {
			t.Fatal("no NetworkPolicy by default")
		}
		d := m.deployment(t)
		if np.Namespace != namespace || !selects(np.Spec.PodSelector.MatchLabels, d.Spec.Template.Labels) {
			t.Errorf("NetworkPolicy %s/%s selects %v, not the manager pods %v", np.Namespace, np.Name, np.Spec.PodSelector.MatchLabels, d.Spec.Template.Labels)
		}
		if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
			t.Errorf("policyTypes %v, want [Ingress]", np.Spec.PolicyTypes)
		}
		got := ingressPorts(t, np)
		want := map[string][]string{"webhook": {"ipBlock:\n  cidr: 0.0.0.0/0", "ipBlock:\n  cidr: ::/0"}}
		if !equalJSON(t, got, want) {
			t.Errorf("ingress %v, want %v", got, want)
		}
		if containerPort(d, "webhook") <= 0 {
			t.Error("the policy opens port webhook, which the manager container does not name")
		}
	})

	t.Run("attribution, configured peers", func(t *testing.T) {
		m := render(t, "siteops", namespace, values(t, `
flags: {author-attribution: true, redis-addr: "redis:6379", commitrequest-webhook-client-ca: /ca.pem}
networkPolicy:
  apiServer: [{ipBlock: {cidr: 172.16.0.0/28}}]
  metrics: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]
  probes: [{ipBlock: {cidr: 10.0.0.0/8}}]
`))
		var np networkingv1.NetworkPolicy
		if !m.get(t, "NetworkPolicy", networkPolicyName, &np) {
			t.Fatal("no NetworkPolicy")
		}
		got := ingressPorts(t, np)
		apiServer := []string{"ipBlock:\n  cidr: 172.16.0.0/28"}
		want := map[string][]string{
			"webhook": apiServer, "audit": apiServer,
			"metrics": {"namespaceSelector:\n  matchLabels:\n    kubernetes.io/metadata.name: monitoring"},
			"health":  {"ipBlock:\n  cidr: 10.0.0.0/8"},
		}
		if !equalJSON(t, got, want) {
			t.Errorf("ingress %v, want %v", got, want)
		}
		d := m.deployment(t)
		for port := range want {
			if containerPort(d, port) <= 0 {
				t.Errorf("the policy opens port %s, which the manager container does not name", port)
			}
		}
	})

	t.Run("no webhooks", func(t *testing.T) {
		m := render(t, "siteops", namespace, values(t, valueSets["tenant only"]))
		var np networkingv1.NetworkPolicy
		if !m.get(t, "NetworkPolicy", networkPolicyName, &np) {
			t.Fatal("no NetworkPolicy")
		}
		if np.Spec.Ingress == nil || len(np.Spec.Ingress) != 0 {
			t.Errorf("ingress %+v, want an empty list (nothing served to anyone but the kubelet)", np.Spec.Ingress)
		}
	})

	t.Run("opt out", func(t *testing.T) {
		m := render(t, "siteops", namespace, values(t, "networkPolicy: {enabled: false}"))
		if len(m.kind("NetworkPolicy")) != 0 {
			t.Error("networkPolicy.enabled false still renders a NetworkPolicy")
		}
	})
}

// TestMirrorResourcesNarrowRBAC: mirror.resources replaces the mirror's read-everything rule
// with one rule per entry and keeps its other generated rules; Secrets cannot be granted.
func TestMirrorResourcesNarrowRBAC(t *testing.T) {
	m := render(t, "siteops", namespace, values(t, `
mirror:
  resources:
    - {apiGroup: "", resources: [configmaps, services]}
    - {apiGroup: apps, resources: [deployments]}
`))
	var role rbacv1.ClusterRole
	if !m.get(t, "ClusterRole", "siteops-mirror", &role) {
		t.Fatal("no ClusterRole siteops-mirror")
	}
	read := []string{"get", "list", "watch"}
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps", "services"}, Verbs: read},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: read},
	}
	for _, g := range generatedRules(t, "mirror") {
		if slices.Contains(g.APIGroups, "*") && slices.Contains(g.Resources, "*") {
			if !slices.Equal(g.Verbs, read) {
				t.Fatalf("the generated read-everything rule has verbs %v, want %v", g.Verbs, read)
			}
			continue
		}
		want = append(want, g)
	}
	slices.SortFunc(want, comparePolicyRules)
	got := slices.Clone(role.Rules)
	slices.SortFunc(got, comparePolicyRules)
	if !equalJSON(t, got, want) {
		a, _ := yaml.Marshal(got)
		b, _ := yaml.Marshal(want)
		t.Errorf("narrowed mirror rules:\n%s\nwant:\n%s", a, b)
	}
	for _, r := range role.Rules {
		if slices.Contains(r.APIGroups, "*") || slices.Contains(r.Resources, "*") {
			t.Errorf("rule %+v still grants every group or resource", r)
		}
		if slices.Contains(r.Resources, "secrets") && !slices.Equal(r.Verbs, []string{"get"}) {
			t.Errorf("rule %+v: the mirror reads credential Secrets by name only", r)
		}
	}
	// The other parts keep their generated rules.
	var tenant rbacv1.ClusterRole
	if m.get(t, "ClusterRole", "siteops-tenant", &tenant) && !equalJSON(t, tenant.Rules, generatedRules(t, "tenant")) {
		t.Error("mirror.resources changed the tenant part's rules")
	}

	for name, doc := range map[string]string{
		"core secrets":   `mirror: {resources: [{apiGroup: "", resources: [configmaps, secrets]}]}`,
		"every core":     `mirror: {resources: [{apiGroup: "", resources: ["*"]}]}`,
		"every resource": `mirror: {resources: [{apiGroup: "*", resources: ["*"]}]}`,
		"no resources":   `mirror: {resources: [{apiGroup: apps}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := newInstall("siteops", namespace).Run(loadChart(t), values(t, doc))
			if err == nil || !strings.Contains(err.Error(), "mirror.resources[0]") {
				t.Errorf("helm accepted %s (%v), want an error naming mirror.resources[0]", doc, err)
			}
		})
	}
}

func comparePolicyRules(a, b rbacv1.PolicyRule) int {
	return strings.Compare(strings.Join(a.APIGroups, ",")+"/"+strings.Join(a.Resources, ","), strings.Join(b.APIGroups, ",")+"/"+strings.Join(b.Resources, ","))
}

// TestWatchRuleWebhook: the chart renders the WatchRule access webhook as the code builds it
// (failurePolicy Fail, matchConditions), only when the mirror serves it, and lets the
// self-signed certificate rotator patch it.
func TestWatchRuleWebhook(t *testing.T) {
	want := ruleaccess.WebhookConfiguration(ruleaccess.ClientConfigFunc(commitrequest.ServiceClientConfig(namespace, "siteops-webhook-service", 443, nil)))
	for _, mode := range []string{"default", "self-signed"} {
		t.Run(mode, func(t *testing.T) {
			m := render(t, "siteops", namespace, values(t, valueSets[mode]))
			var got admissionregistrationv1.ValidatingWebhookConfiguration
			if !m.get(t, "ValidatingWebhookConfiguration", ruleaccess.WebhookConfigName, &got) {
				t.Fatalf("no ValidatingWebhookConfiguration %s", ruleaccess.WebhookConfigName)
			}
			if !equalJSON(t, got.Webhooks, want.Webhooks) {
				a, _ := yaml.Marshal(got.Webhooks)
				b, _ := yaml.Marshal(want.Webhooks)
				t.Errorf("WatchRule webhooks differ from ruleaccess.WebhookConfiguration:\nchart:\n%s\ncode:\n%s", a, b)
			}
			if mode == "default" && got.Annotations["cert-manager.io/inject-ca-from"] != namespace+"/siteops-serving-cert" {
				t.Errorf("cert-manager CA injection annotation %q", got.Annotations["cert-manager.io/inject-ca-from"])
			}
			if mode != "self-signed" {
				return
			}
			var cr rbacv1.ClusterRole
			m.get(t, "ClusterRole", "siteops-webhookcert", &cr)
			for _, r := range cr.Rules {
				if slices.Contains(r.Resources, "validatingwebhookconfigurations") && !slices.Contains(r.ResourceNames, ruleaccess.WebhookConfigName) {
					t.Errorf("rule %+v: the certificate rotator cannot patch %s", r, ruleaccess.WebhookConfigName)
				}
			}
		})
	}
	t.Run("config/default", func(t *testing.T) {
		k := kustomizeBuild(t, "../config/default")
		var got, cr admissionregistrationv1.ValidatingWebhookConfiguration
		if !k.get(t, "ValidatingWebhookConfiguration", ruleaccess.WebhookConfigName, &got) || !k.get(t, "ValidatingWebhookConfiguration", commitrequest.WebhookConfigName, &cr) {
			t.Fatalf("config/default has no %s or %s", ruleaccess.WebhookConfigName, commitrequest.WebhookConfigName)
		}
		if !equalJSON(t, got.Webhooks, want.Webhooks) {
			t.Error("config/webhook's WatchRule webhook differs from ruleaccess.WebhookConfiguration")
		}
		if a := got.Annotations["cert-manager.io/inject-ca-from"]; a == "" || a != cr.Annotations["cert-manager.io/inject-ca-from"] {
			t.Errorf("config/default: cert-manager injects %q into the WatchRule webhook, %q into the CommitRequest one", a, cr.Annotations["cert-manager.io/inject-ca-from"])
		}
	})
	for name, doc := range map[string]string{"flag off": "flags: {watchrule-webhook: false}", "no mirror": valueSets["decofile only"]} {
		t.Run(name, func(t *testing.T) {
			m := render(t, "siteops", namespace, values(t, doc))
			if m.get(t, "ValidatingWebhookConfiguration", ruleaccess.WebhookConfigName, nil) {
				t.Errorf("%s: the WatchRule webhook is rendered, but the manager does not serve it (failurePolicy Fail would block every WatchRule)", name)
			}
		})
	}
}
