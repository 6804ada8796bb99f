// Package charts_test lints and renders the siteops Helm chart with the Helm Go module, checks
// what it renders against the code it installs (manager flags, RBAC markers, webhook
// configurations, metric names), and installs the result into a real API server.
package charts_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"

	"github.com/siteops/siteops/internal/decofile/inject"
	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/mirror/commitrequest"
	"github.com/siteops/siteops/internal/mirror/ruleaccess"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

func TestMain(m *testing.M) {
	logf.SetLogger(logr.Discard())
	testenv.Main(m, servers.APIServerOptions{})
}

const (
	chartDir  = "siteops"
	namespace = "siteops-system"
)

// kubeVersion is the Kubernetes version the chart is rendered for (the one the tests run).
var kubeVersion = &chartutil.KubeVersion{Version: "v1.37.2", Major: "1", Minor: "37"}

// secretFlags are the manager flags that carry credentials. They are never chart values: the
// chart passes them as environment variables from Secrets (the env var the flag defaults from),
// or, for flags without such a default, as $(VAR) expanded by the kubelet.
var secretFlags = map[string]string{
	"valkey-admin-password":    "VALKEY_ADMIN_PASSWORD",
	"valkey-sentinel-password": "VALKEY_SENTINEL_PASSWORD",
	"redis-password":           "REDIS_PASSWORD",
	"redis-sentinel-password":  "REDIS_SENTINEL_PASSWORD",
}

// computedFlags are value keys that are null by default because the chart fills them from the
// release (names and namespace) or, for the web UI's, from the ui values.
var computedFlags = []string{"webhook-cert-hosts", "webhook-ca-secret", "leader-election-namespace", "secret-hash-key-secret",
	"ui-bind-address", "ui-cert-dir", "ui-proxy-ca-file", "ui-proxy-names",
	"ui-oidc-issuer-url", "ui-oidc-client-id", "ui-oidc-client-secret-file", "ui-oidc-redirect-url", "ui-oidc-username-claim",
	"ui-oidc-groups-claim", "ui-oidc-username-prefix", "ui-oidc-groups-prefix", "ui-oidc-cookie-secret-file", "ui-oidc-ca-file"}

// managerFlags is the manager's real flag set with its defaults.
func managerFlags() (*pflag.FlagSet, *manager.Options) {
	o := manager.DefaultOptions()
	fs := pflag.NewFlagSet("siteops-manager", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.BindFlags(fs)
	// Hidden flags are deprecated aliases of v0.11's names (docs/migration.md): the chart sets
	// the siteops name, so they are no chart value and no row of the flag tables.
	visible := pflag.NewFlagSet("siteops-manager", pflag.ContinueOnError)
	visible.SetOutput(io.Discard)
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			visible.AddFlag(f)
		}
	})
	return visible, &o
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	return c
}

// values parses a YAML values overlay.
func values(t *testing.T, doc string) map[string]any {
	t.Helper()
	v := map[string]any{}
	if err := yaml.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatalf("values %q: %v", doc, err)
	}
	return v
}

// manifests is a rendered release, by kind.
type manifests struct {
	objs []*unstructured.Unstructured
}

func (m manifests) kind(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range m.objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

func (m manifests) get(t *testing.T, kind, name string, into any) bool {
	t.Helper()
	for _, o := range m.kind(kind) {
		if o.GetName() == name {
			if into != nil {
				b, err := json.Marshal(o.Object)
				if err == nil {
					err = json.Unmarshal(b, into)
				}
				if err != nil {
					t.Fatalf("%s %s: %v", kind, name, err)
				}
			}
			return true
		}
	}
	return false
}

func (m manifests) deployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	ds := m.kind("Deployment")
	if len(ds) != 1 {
		t.Fatalf("want one Deployment, got %d", len(ds))
	}
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(ds[0].Object, &d); err != nil {
		t.Fatal(err)
	}
	return &d
}

// newInstall is `helm template`: a client-only dry-run install.
func newInstall(release, ns string) *action.Install {
	install := action.NewInstall(&action.Configuration{})
	install.DryRun = true
	install.ClientOnly = true
	install.ReleaseName = release
	install.Namespace = ns
	install.KubeVersion = kubeVersion
	install.DisableHooks = true
	return install
}

// render templates the chart as `helm template` does, for release "siteops" in ns.
func render(t *testing.T, release, ns string, vals map[string]any) manifests {
	t.Helper()
	rel, err := newInstall(release, ns).Run(loadChart(t), vals)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	objs, err := decodeAll(rel.Manifest)
	if err != nil {
		t.Fatalf("rendered manifest: %v\n%s", err, rel.Manifest)
	}
	return manifests{objs: objs}
}

func decodeAll(doc string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(doc), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

var valueSets = map[string]string{
	"default":                  "",
	"self-signed":              "flags: {webhook-self-signed: true}",
	"decofile only":            "flags: {controllers: [decofile]}",
	"tenant only":              "flags: {controllers: [tenant]}",
	"mirror only":              "flags: {controllers: mirror}",
	"no commitrequest webhook": "flags: {commitrequest-webhook: false}",
	"no injection":             "flags: {decofile-disable-injection: true}",
	"monitoring":               "metrics: {serviceMonitor: {enabled: true}, prometheusRule: {enabled: true}, dashboard: {enabled: true}}",
	"secrets":                  "secrets: {githubToken: {name: gh}, valkeyAdminPassword: {name: valkey}, valkeySentinelPassword: {name: sentinel}, redisPassword: {name: redis}, redisSentinelPassword: {name: rsentinel}, s3Credentials: {name: s3}}",
	"no metrics":               `flags: {metrics-bind-address: "0"}`,
	"lease elsewhere":          "flags: {leader-election-namespace: leases}",
	"audit self-signed":        auditOn("{certificates: self-signed, service: {type: NodePort, nodePort: 30444}, ipAddresses: [10.0.0.5]}"),
	"audit cert-manager":       auditOn("{certificates: cert-manager}"),
	"ui":                       uiOn,
}

func TestLint(t *testing.T) {
	for name, doc := range valueSets {
		t.Run(name, func(t *testing.T) {
			l := lint.AllWithKubeVersion(chartDir, values(t, doc), namespace, kubeVersion)
			for _, m := range l.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("helm lint: %s", m)
				}
			}
		})
	}
}

// TestEveryFlagIsAValue fails when the manager gains a flag the chart has no value for, or the
// chart has a value for a flag that is gone, and when the chart's defaults differ from the
// manager's.
func TestEveryFlagIsAValue(t *testing.T) {
	fs, _ := managerFlags()
	flags, ok := loadChart(t).Values["flags"].(map[string]any)
	if !ok {
		t.Fatal("values.yaml has no flags map")
	}
	fs.VisitAll(func(f *pflag.Flag) {
		_, isValue := flags[f.Name]
		_, isSecret := secretFlags[f.Name]
		switch {
		case isSecret && isValue:
			t.Errorf("flag --%s carries a credential: pass it from a Secret, not as flags.%s", f.Name, f.Name)
		case !isSecret && !isValue:
			t.Errorf("flag --%s (%s) has no value: add flags.%s to charts/siteops/values.yaml (default %s)", f.Name, f.Usage, f.Name, f.DefValue)
		}
	})
	for name := range flags {
		if fs.Lookup(name) == nil {
			t.Errorf("values.yaml flags.%s is no siteops-manager flag: remove or rename it", name)
		}
	}
	for name := range secretFlags {
		if fs.Lookup(name) == nil {
			t.Errorf("credential flag --%s is gone from the manager: update secretFlags and the chart", name)
		}
	}

	// The chart's explicit defaults are the manager's defaults, so the docs and the binary agree.
	for name, v := range flags {
		f := fs.Lookup(name)
		if f == nil || v == nil {
			if v == nil && !slices.Contains(computedFlags, name) {
				t.Errorf("flags.%s is null: give it the manager's default %s", name, f.DefValue)
			}
			continue
		}
		single, _ := managerFlags()
		if err := single.Set(name, flagValue(v)); err != nil {
			t.Errorf("flags.%s = %v does not parse: %v", name, v, err)
			continue
		}
		if got := single.Lookup(name).Value.String(); got != f.DefValue {
			t.Errorf("flags.%s = %s, but the manager's default is %s: keep them equal", name, got, f.DefValue)
		}
	}
}

// flagValue mirrors the chart's siteops.flagValue helper for the default-values check.
func flagValue(v any) string {
	switch v := v.(type) {
	case []any:
		s := make([]string, len(v))
		for i, e := range v {
			s[i] = fmt.Sprint(e)
		}
		return strings.Join(s, ",")
	case float64:
		return fmt.Sprint(int64(v))
	default:
		return fmt.Sprint(v)
	}
}

// parseArgs parses the manager container's args with the manager's real flag set, expanding
// $(VAR) references to env vars as the kubelet does.
func parseArgs(t *testing.T, d *appsv1.Deployment) (*pflag.FlagSet, *manager.Options) {
	t.Helper()
	c := d.Spec.Template.Spec.Containers[0]
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = true
	}
	args := make([]string, len(c.Args))
	for i, a := range c.Args {
		args[i] = os.Expand(strings.ReplaceAll(a, "$(", "${"), func(name string) string {
			if !env[name] {
				t.Errorf("arg %q refers to $(%s), which the container does not define", a, name)
			}
			return "from-secret-" + name
		})
	}
	fs, o := managerFlags()
	if err := fs.Parse(args); err != nil {
		t.Fatalf("the manager rejects the rendered args %q: %v", args, err)
	}
	if fs.NArg() != 0 {
		t.Errorf("stray arguments %q", fs.Args())
	}
	return fs, o
}

func TestDeploymentArgsParse(t *testing.T) {
	for name, doc := range valueSets {
		t.Run(name, func(t *testing.T) {
			m := render(t, "siteops", namespace, values(t, doc))
			d := m.deployment(t)
			fs, o := parseArgs(t, d)
			// Every value that is set reaches the manager.
			flags := loadChart(t).Values["flags"].(map[string]any)
			if overlay, ok := values(t, doc)["flags"].(map[string]any); ok {
				maps.Copy(flags, overlay)
			}
			for k, v := range flags {
				if v != nil && !fs.Changed(k) {
					t.Errorf("flags.%s is set but not passed to the manager", k)
				}
			}
			if *d.Spec.Replicas != 2 || !o.LeaderElect {
				t.Errorf("replicas %d, leader election %v: want 2 replicas electing a leader", *d.Spec.Replicas, o.LeaderElect)
			}
		})
	}
}

// TestCompleteValuesValidate renders what a real installation sets (the Valkey and Redis
// addresses have no defaults) and runs the manager's own validation on the result.
func TestCompleteValuesValidate(t *testing.T) {
	m := render(t, "siteops", namespace, values(t, `
flags:
  valkey-sentinel-addrs: [valkey-sentinel-0.valkey:26379, valkey-sentinel-1.valkey:26379]
  redis-addr: valkey.valkey:6379
  commitrequest-webhook-client-ca: /etc/siteops/apiserver-admission/ca.crt
  github-token-orgs: [deco-sites]
secrets:
  valkeyAdminPassword: {name: valkey-admin}
  redisPassword: {name: mirror-redis}
  githubToken: {name: github}
`))
	_, o := parseArgs(t, m.deployment(t))
	if err := o.Validate(); err != nil {
		t.Errorf("the manager rejects the rendered flags: %v", err)
	}
	if len(o.Tenant.SentinelAddrs) != 2 || o.Mirror.RedisAddr != "valkey.valkey:6379" {
		t.Errorf("values not passed: %+v", o)
	}
}

func TestComputedFlags(t *testing.T) {
	m := render(t, "ops", "platform", values(t, "flags: {webhook-self-signed: true}"))
	_, o := parseArgs(t, m.deployment(t))
	want := []string{"ops-siteops-webhook-service.platform.svc", "ops-siteops-webhook-service.platform.svc.cluster.local"}
	if !slices.Equal(o.WebhookCertHosts, want) {
		t.Errorf("--webhook-cert-hosts = %v, want %v", o.WebhookCertHosts, want)
	}
	if o.WebhookCASecret != "platform/ops-siteops-webhook-ca" || !o.WebhookSelfSigned {
		t.Errorf("self-signed %v with CA Secret %q, want platform/ops-siteops-webhook-ca shared by the replicas", o.WebhookSelfSigned, o.WebhookCASecret)
	}
	if !m.get(t, "Service", "ops-siteops-webhook-service", nil) {
		t.Error("the certificate hosts name a Service the chart does not create")
	}
}

func TestCredentialsOnlyFromSecrets(t *testing.T) {
	m := render(t, "siteops", namespace, values(t, valueSets["secrets"]))
	c := m.deployment(t).Spec.Template.Spec.Containers[0]
	want := map[string]string{"GITHUB_TOKEN": "gh", "VALKEY_ADMIN_PASSWORD": "valkey", "VALKEY_SENTINEL_PASSWORD": "sentinel", "REDIS_PASSWORD": "redis", "REDIS_SENTINEL_PASSWORD": "rsentinel", "AWS_ACCESS_KEY_ID": "s3", "AWS_SECRET_ACCESS_KEY": "s3"}
	for _, e := range c.Env {
		if secret, ok := want[e.Name]; ok {
			if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != secret {
				t.Errorf("env %s = %+v, want it from Secret %s", e.Name, e, secret)
			}
			delete(want, e.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("env vars missing: %v", slices.Sorted(maps.Keys(want)))
	}
	if !slices.Contains(c.Args, "--valkey-sentinel-password=$(VALKEY_SENTINEL_PASSWORD)") {
		t.Errorf("args %q do not take the Sentinel password from its env var", c.Args)
	}
	// Every env var a credential flag defaults from is one the chart sets from a Secret.
	for flag, env := range secretFlags {
		if !strings.Contains(fmt.Sprint(c.Env), env) {
			t.Errorf("--%s: the chart sets no %s from a Secret", flag, env)
		}
	}
	d := render(t, "siteops", namespace, nil).deployment(t)
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		// POD_NAMESPACE and GOMEMLIMIT carry no credential; anything else must be opted into.
		if e.Name != "POD_NAMESPACE" && e.Name != "GOMEMLIMIT" {
			t.Errorf("default values set env %s; credentials must be opted into by naming a Secret", e.Name)
		}
	}
}

// generatedRules reads the rules controller-gen wrote for part.
func generatedRules(t *testing.T, part string) []rbacv1.PolicyRule {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "files", "rbac", part+".yaml"))
	if err != nil {
		t.Fatalf("%v (run make manifests)", err)
	}
	var r rbacv1.ClusterRole
	if err := yaml.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Rules) == 0 {
		t.Fatalf("files/rbac/%s.yaml has no rules", part)
	}
	return r.Rules
}

// TestRBACPerPart checks that each enabled part gets exactly the permissions of its markers and a
// disabled part none.
func TestRBACPerPart(t *testing.T) {
	for _, parts := range [][]string{manager.Parts, {"decofile"}, {"tenant"}, {"mirror"}, {"tenant", "mirror"}} {
		t.Run(strings.Join(parts, "+"), func(t *testing.T) {
			m := render(t, "siteops", namespace, map[string]any{"flags": map[string]any{"controllers": toAny(parts)}})
			var roles []string
			for _, r := range m.kind("ClusterRole") {
				if _, manager := r.GetLabels()["siteops.dev/part"]; manager {
					roles = append(roles, r.GetName())
				}
			}
			sort.Strings(roles)
			var want []string
			for _, p := range parts {
				want = append(want, "siteops-"+p)
			}
			sort.Strings(want)
			if !slices.Equal(roles, want) {
				t.Errorf("ClusterRoles %v, want %v", roles, want)
			}
			for _, p := range parts {
				var role rbacv1.ClusterRole
				m.get(t, "ClusterRole", "siteops-"+p, &role)
				if gen := generatedRules(t, p); !equalJSON(t, role.Rules, gen) {
					t.Errorf("ClusterRole siteops-%s rules differ from files/rbac/%s.yaml", p, p)
				}
				var b rbacv1.ClusterRoleBinding
				if !m.get(t, "ClusterRoleBinding", "siteops-"+p, &b) || b.RoleRef.Name != "siteops-"+p ||
					len(b.Subjects) != 1 || b.Subjects[0].Name != "siteops-manager" || b.Subjects[0].Namespace != namespace {
					t.Errorf("ClusterRoleBinding siteops-%s = %+v, want it to bind the role to the siteops ServiceAccount", p, b)
				}
			}
			hasWebhooks := len(m.kind("MutatingWebhookConfiguration"))+len(m.kind("ValidatingWebhookConfiguration")) > 0
			if want := slices.Contains(parts, "decofile") || slices.Contains(parts, "mirror"); hasWebhooks != want {
				t.Errorf("webhook configurations rendered: %v, want them exactly when the decofile or mirror part runs", hasWebhooks)
			}
			// The leader election Role, and the mirror's for creating its hash key Secret.
			wantRoles := 1
			if slices.Contains(parts, "mirror") {
				wantRoles = 2
			}
			if len(m.kind("Role")) != wantRoles || len(m.kind("RoleBinding")) != wantRoles {
				t.Errorf("want %d Roles and RoleBindings (leader election, the mirror's hash key), got %d and %d", wantRoles, len(m.kind("Role")), len(m.kind("RoleBinding")))
			}
		})
	}
}

func toAny(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err := yaml.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := yaml.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(ja, jb)
}

func TestSelfSignedRBAC(t *testing.T) {
	m := render(t, "siteops", namespace, values(t, valueSets["self-signed"]))
	var cr rbacv1.ClusterRole
	if !m.get(t, "ClusterRole", "siteops-webhookcert", &cr) {
		t.Fatal("self-signed mode renders no ClusterRole for the webhook configurations")
	}
	for _, r := range cr.Rules {
		if slices.Contains(r.APIGroups, "") {
			t.Errorf("cluster-wide rule %+v: Secret access of the certificate rotator belongs in the release namespace", r)
		}
		want := []string{inject.ValidatingConfigName, commitrequest.WebhookConfigName, ruleaccess.WebhookConfigName}
		if slices.Equal(r.Resources, []string{"mutatingwebhookconfigurations"}) {
			want = []string{inject.MutatingConfigName}
		} else if !slices.Equal(r.Resources, []string{"validatingwebhookconfigurations"}) {
			t.Errorf("rule %+v: one rule per kind of webhook configuration, naming that kind's", r)
		}
		if !slices.Equal(r.ResourceNames, want) {
			t.Errorf("rule %+v: limit it to the webhook configurations of its kind the manager patches, %v", r, want)
		}
	}
	var role rbacv1.Role
	if !m.get(t, "Role", "siteops-webhookcert", &role) || role.Namespace != namespace {
		t.Fatalf("no Role siteops-webhookcert in %s for the CA Secret", namespace)
	}
	var all []rbacv1.PolicyRule
	all = append(all, cr.Rules...)
	all = append(all, role.Rules...)
	for _, g := range generatedRules(t, "webhookcert") {
		if !covered(g, all) {
			t.Errorf("generated rule %+v of the webhookcert part is not granted", g)
		}
	}
	if m.get(t, "ClusterRole", "siteops-webhookcert", nil) && !m.get(t, "ClusterRole", "siteops-webhookcert", nil) {
		t.Fatal("unreachable")
	}
	if d := render(t, "siteops", namespace, nil); d.get(t, "ClusterRole", "siteops-webhookcert", nil) || d.get(t, "Role", "siteops-webhookcert", nil) {
		t.Error("cert-manager mode must not grant the self-signed certificate permissions")
	}
}

// covered reports whether every group/resource/verb of g is granted by some rule.
func covered(g rbacv1.PolicyRule, rules []rbacv1.PolicyRule) bool {
	for _, grp := range g.APIGroups {
		for _, res := range g.Resources {
			for _, verb := range g.Verbs {
				ok := false
				for _, r := range rules {
					ok = ok || (slices.Contains(r.APIGroups, grp) && slices.Contains(r.Resources, res) && slices.Contains(r.Verbs, verb))
				}
				if !ok {
					return false
				}
			}
		}
	}
	return true
}

// TestWebhooksMatchCode compares the rendered webhook configurations with the ones the
// injection code serves and registers (names, rules, matchConditions, failurePolicy).
func TestWebhooksMatchCode(t *testing.T) {
	for _, mode := range []string{"default", "self-signed"} {
		t.Run(mode, func(t *testing.T) {
			m := render(t, "siteops", namespace, values(t, valueSets[mode]))
			wantM, wantV := inject.WebhookConfigurations(inject.ServiceClientConfig(namespace, "siteops-webhook-service", 443))
			var gotM admissionregistrationv1.MutatingWebhookConfiguration
			var gotV admissionregistrationv1.ValidatingWebhookConfiguration
			if !m.get(t, "MutatingWebhookConfiguration", inject.MutatingConfigName, &gotM) {
				t.Fatalf("no MutatingWebhookConfiguration %s", inject.MutatingConfigName)
			}
			if !m.get(t, "ValidatingWebhookConfiguration", inject.ValidatingConfigName, &gotV) {
				t.Fatalf("no ValidatingWebhookConfiguration %s", inject.ValidatingConfigName)
			}
			if !equalJSON(t, gotM.Webhooks, wantM.Webhooks) {
				a, _ := yaml.Marshal(gotM.Webhooks)
				b, _ := yaml.Marshal(wantM.Webhooks)
				t.Errorf("mutating webhooks differ from inject.WebhookConfigurations:\nchart:\n%s\ncode:\n%s", a, b)
			}
			if !equalJSON(t, gotV.Webhooks, wantV.Webhooks) {
				t.Errorf("validating webhooks differ from inject.WebhookConfigurations")
			}
			wantCR := commitrequest.WebhookConfiguration(commitrequest.ServiceClientConfig(namespace, "siteops-webhook-service", 443, nil))
			var gotCR admissionregistrationv1.ValidatingWebhookConfiguration
			if !m.get(t, "ValidatingWebhookConfiguration", wantCR.Name, &gotCR) {
				t.Fatalf("no ValidatingWebhookConfiguration %s", wantCR.Name)
			}
			if !equalJSON(t, gotCR.Webhooks, wantCR.Webhooks) {
				a, _ := yaml.Marshal(gotCR.Webhooks)
				b, _ := yaml.Marshal(wantCR.Webhooks)
				t.Errorf("CommitRequest webhooks differ from commitrequest.WebhookConfiguration:\nchart:\n%s\ncode:\n%s", a, b)
			}
			if gotCR.Annotations["cert-manager.io/inject-ca-from"] != gotM.Annotations["cert-manager.io/inject-ca-from"] {
				t.Error("the CommitRequest webhook takes its CA from another Certificate than the Decofile webhooks")
			}

			d := m.deployment(t)
			var svc corev1.Service
			if !m.get(t, "Service", "siteops-webhook-service", &svc) {
				t.Fatal("no webhook Service")
			}
			if !selects(svc.Spec.Selector, d.Spec.Template.Labels) {
				t.Errorf("webhook Service selector %v does not select the manager pods %v", svc.Spec.Selector, d.Spec.Template.Labels)
			}
			_, o := parseArgs(t, d)
			if p := containerPort(d, svc.Spec.Ports[0].TargetPort.StrVal); p != int32(o.WebhookPort) {
				t.Errorf("webhook Service targets container port %d, the manager listens on %d", p, o.WebhookPort)
			}
			mount := volumeAt(d, o.WebhookCertDir)
			if mount == nil {
				t.Fatalf("nothing mounted at --webhook-cert-dir %s", o.WebhookCertDir)
			}
			inj := gotM.Annotations["cert-manager.io/inject-ca-from"]
			if mode == "self-signed" {
				if inj != "" || len(m.kind("Certificate")) != 0 || mount.EmptyDir == nil {
					t.Errorf("self-signed mode: cainjector annotation %q, %d Certificates, cert volume %+v; want none, none, an emptyDir", inj, len(m.kind("Certificate")), mount)
				}
				return
			}
			// cert-manager: the annotation names the Certificate, which covers the Service and
			// writes the Secret the manager mounts.
			if gotV.Annotations["cert-manager.io/inject-ca-from"] != inj {
				t.Error("the two webhook configurations take their CA from different Certificates")
			}
			ns, name, _ := strings.Cut(inj, "/")
			var cert struct {
				Metadata struct{ Namespace string }
				Spec     struct {
					DNSNames   []string `json:"dnsNames"`
					SecretName string   `json:"secretName"`
					IssuerRef  struct{ Kind, Name string }
				}
			}
			if ns != namespace || !m.get(t, "Certificate", name, &cert) {
				t.Fatalf("cert-manager.io/inject-ca-from %q names no rendered Certificate", inj)
			}
			if !slices.Contains(cert.Spec.DNSNames, "siteops-webhook-service."+namespace+".svc") {
				t.Errorf("Certificate dnsNames %v miss the webhook Service", cert.Spec.DNSNames)
			}
			if mount.Secret == nil || mount.Secret.SecretName != cert.Spec.SecretName {
				t.Errorf("the manager mounts %+v at the cert dir, the Certificate writes Secret %s", mount, cert.Spec.SecretName)
			}
			if !m.get(t, cert.Spec.IssuerRef.Kind, cert.Spec.IssuerRef.Name, nil) {
				t.Errorf("the Certificate's issuer %s %s is not rendered", cert.Spec.IssuerRef.Kind, cert.Spec.IssuerRef.Name)
			}
		})
	}
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func containerPort(d *appsv1.Deployment, name string) int32 {
	for _, p := range d.Spec.Template.Spec.Containers[0].Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return -1
}

func volumeAt(d *appsv1.Deployment, path string) *corev1.VolumeSource {
	for _, vm := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
		if vm.MountPath == path {
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.Name == vm.Name {
					return &v.VolumeSource
				}
			}
		}
	}
	return nil
}

func TestMetricsAndPDB(t *testing.T) {
	m := render(t, "siteops", namespace, values(t, valueSets["monitoring"]))
	d := m.deployment(t)
	_, o := parseArgs(t, d)
	var svc corev1.Service
	if !m.get(t, "Service", "siteops-metrics", &svc) || !selects(svc.Spec.Selector, d.Spec.Template.Labels) {
		t.Fatalf("metrics Service missing or not selecting the manager pods: %+v", svc.Spec.Selector)
	}
	if p := containerPort(d, "metrics"); fmt.Sprintf(":%d", p) != o.MetricsAddr {
		t.Errorf("metrics container port %d, manager binds %s", p, o.MetricsAddr)
	}
	var sm struct {
		Spec struct {
			Selector  struct{ MatchLabels map[string]string } `json:"selector"`
			Endpoints []struct{ Port string }
		}
	}
	if !m.get(t, "ServiceMonitor", "siteops", &sm) || !selects(sm.Spec.Selector.MatchLabels, svc.Labels) || sm.Spec.Endpoints[0].Port != "metrics" {
		t.Errorf("ServiceMonitor %+v does not scrape the metrics Service (labels %v)", sm, svc.Labels)
	}
	var webhookSvc corev1.Service
	m.get(t, "Service", "siteops-webhook-service", &webhookSvc)
	if selects(sm.Spec.Selector.MatchLabels, webhookSvc.Labels) {
		t.Error("the ServiceMonitor also selects the webhook Service")
	}
	var pdb struct {
		Spec struct {
			MinAvailable int
			Selector     struct{ MatchLabels map[string]string }
		}
	}
	if !m.get(t, "PodDisruptionBudget", "siteops-manager", &pdb) || pdb.Spec.MinAvailable != 1 || !selects(pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels) {
		t.Errorf("PodDisruptionBudget %+v must keep one manager pod", pdb)
	}
	if len(m.kind("PrometheusRule")) != 1 || len(m.kind("ConfigMap")) != 1 {
		t.Errorf("want the PrometheusRule and the dashboard ConfigMap")
	}

	off := render(t, "siteops", namespace, values(t, valueSets["no metrics"]))
	if off.get(t, "Service", "siteops-metrics", nil) || containerPort(off.deployment(t), "metrics") != -1 {
		t.Error("--metrics-bind-address=0 still renders the metrics Service or port")
	}
}

// TestGeneratedFilesCurrent fails when the chart's copies of generated files are stale.
func TestGeneratedFilesCurrent(t *testing.T) {
	pairs := map[string]string{
		filepath.Join(chartDir, "files", "webhooks.yaml"):     filepath.Join("..", "config", "webhook", "manifests.yaml"),
		filepath.Join(chartDir, "files", "tenant-roles.yaml"): filepath.Join("..", "config", "rbac", "tenant_roles.yaml"),
	}
	bases, err := filepath.Glob(filepath.Join("..", "config", "crd", "bases", "*.yaml"))
	if err != nil || len(bases) == 0 {
		t.Fatalf("no CRDs in config/crd/bases: %v", err)
	}
	for _, b := range bases {
		pairs[filepath.Join(chartDir, "crds", filepath.Base(b))] = b
	}
	chartCRDs, _ := filepath.Glob(filepath.Join(chartDir, "crds", "*.yaml"))
	if len(chartCRDs) != len(bases) {
		t.Errorf("chart has %d CRDs, config/crd/bases %d: run make manifests", len(chartCRDs), len(bases))
	}
	for copyPath, src := range pairs {
		a, errA := os.ReadFile(copyPath)
		b, errB := os.ReadFile(src)
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			t.Errorf("%s is not a current copy of %s (%v, %v): run make manifests", copyPath, src, errA, errB)
		}
	}
}

// TestRBACFilesCurrent regenerates each part's rules from its RBAC markers with controller-gen
// and fails when files/rbac is stale, so a new marker cannot silently miss the chart.
func TestRBACFilesCurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("runs controller-gen")
	}
	for _, part := range []string{"decofile", "tenant", "mirror", "webhookcert"} {
		cmd := exec.Command("go", "tool", "-modfile=hack/tools/go.mod", "controller-gen",
			"rbac:roleName=siteops-"+part, "paths=./internal/"+part+"/...", "output:rbac:stdout")
		cmd.Dir = ".."
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("controller-gen for %s: %v\n%s", part, err, stderr.String())
		}
		have, err := os.ReadFile(filepath.Join(chartDir, "files", "rbac", part+".yaml"))
		if err != nil || !bytes.Equal(have, out) {
			t.Errorf("charts/siteops/files/rbac/%s.yaml is stale (%v): run make manifests", part, err)
		}
	}
}

// TestNotesWarnAboutMissingSettings checks that helm install tells what a working installation
// still needs.
func TestNotesWarnAboutMissingSettings(t *testing.T) {
	notes := func(doc string) string {
		rel, err := newInstall("siteops", namespace).Run(loadChart(t), values(t, doc))
		if err != nil {
			t.Fatal(err)
		}
		return rel.Info.Notes
	}
	if n := notes(""); !strings.Contains(n, "flags.valkey-sentinel-addrs") || !strings.Contains(n, "flags.redis-addr") || !strings.Contains(n, "cert-manager") || !strings.Contains(n, "networkPolicy.apiServer admits 0.0.0.0/0") ||
		!strings.Contains(n, "flags.commitrequest-webhook-client-ca") {
		t.Errorf("default notes do not name the missing settings:\n%s", n)
	}
	n := notes("flags: {valkey-url: 'redis://valkey:6379', redis-addr: 'valkey:6379', webhook-self-signed: true, commitrequest-webhook-client-ca: /etc/siteops/apiserver-ca.pem}\nsecrets: {valkeyAdminPassword: {name: v}}\nnetworkPolicy: {apiServer: [{ipBlock: {cidr: 192.0.2.0/24}}]}")
	if strings.Contains(n, "WARNING") || strings.Contains(n, "Note:") || !strings.Contains(n, "siteops-system/siteops-webhook-ca") {
		t.Errorf("complete values still warn, or self-signed mode is not explained:\n%s", n)
	}
	// The CommitRequest webhook's warning follows the helper that decides whether it is served.
	if n := notes("flags: {commitrequest-webhook: false}"); strings.Contains(n, "commitrequest-webhook-client-ca") {
		t.Errorf("notes warn about the CommitRequest webhook's client CA while it is off:\n%s", n)
	}
}

// TestCommitRequestWebhookNeedsClientCA: the chart refuses to serve the CommitRequest webhook
// (mirror part with redis-addr) without its client CA, as the manager refuses to start, and
// says which value to set.
func TestCommitRequestWebhookNeedsClientCA(t *testing.T) {
	install := func(doc string) error {
		_, err := newInstall("siteops", namespace).Run(loadChart(t), values(t, doc))
		return err
	}
	err := install("flags: {redis-addr: 'valkey:6379'}")
	if err == nil || !strings.Contains(err.Error(), "flags.commitrequest-webhook-client-ca is required") || !strings.Contains(err.Error(), "flags.commitrequest-webhook: false") {
		t.Errorf("redis-addr without the client CA: %v, want a refusal naming both values", err)
	}
	for _, doc := range []string{
		"flags: {redis-addr: 'valkey:6379', commitrequest-webhook-client-ca: /etc/siteops/ca.crt}",
		"flags: {redis-addr: 'valkey:6379', commitrequest-webhook: false}",
		"flags: {redis-addr: 'valkey:6379', controllers: [decofile, tenant]}",
	} {
		if err := install(doc); err != nil {
			t.Errorf("%s: %v", doc, err)
		}
	}
}

// TestWebhooksPerPart renders each part's webhook configurations only when that part serves
// them, and the webhook Service whenever any is rendered.
func TestWebhooksPerPart(t *testing.T) {
	for name, want := range map[string][]string{
		"decofile only":            {inject.MutatingConfigName, inject.ValidatingConfigName},
		"mirror only":              {commitrequest.WebhookConfigName, ruleaccess.WebhookConfigName},
		"tenant only":              nil,
		"no injection":             {commitrequest.WebhookConfigName, ruleaccess.WebhookConfigName},
		"no commitrequest webhook": {inject.MutatingConfigName, inject.ValidatingConfigName, ruleaccess.WebhookConfigName},
	} {
		t.Run(name, func(t *testing.T) {
			m := render(t, "siteops", namespace, values(t, valueSets[name]))
			var got []string
			for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} {
				for _, o := range m.kind(kind) {
					got = append(got, o.GetName())
				}
			}
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("webhook configurations %v, want %v", got, want)
			}
			if has := m.get(t, "Service", "siteops-webhook-service", nil); has != (len(want) > 0) {
				t.Errorf("webhook Service rendered: %v, want %v", has, len(want) > 0)
			}
		})
	}
}
