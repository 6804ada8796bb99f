package charts_test

import (
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/testenv"
	"github.com/siteops/siteops/internal/ui"
)

// uiOn turns the web UI on with its two required Secrets.
const uiOn = "ui: {enabled: true, certSecret: siteops-ui-tls, proxyCASecret: siteops-ui-proxy-ca, proxyNames: [oauth2-proxy]}"

// uiRights are what the UI does with the manager's ServiceAccount: act as the person the proxy
// names, and ask the API server what that person may read.
var uiRights = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"users", "groups"}, Verbs: []string{"impersonate"}},
	{APIGroups: []string{"authorization.k8s.io"}, Resources: []string{"subjectaccessreviews"}, Verbs: []string{"create"}},
}

// deploymentsByName decodes every rendered Deployment.
func deploymentsByName(t *testing.T, m manifests) map[string]*appsv1.Deployment {
	t.Helper()
	out := map[string]*appsv1.Deployment{}
	for _, u := range m.kind("Deployment") {
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
			t.Fatal(err)
		}
		out[d.Name] = &d
	}
	return out
}

// uiArgs are the manager args that configure the UI.
func uiArgs(d *appsv1.Deployment) []string {
	var out []string
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--ui-") {
			out = append(out, a)
		}
	}
	return out
}

// TestUIRendersWhenEnabled: with ui.enabled, the main instance's Deployment (not a shard's)
// passes the four UI flags, mounts the serving certificate and the proxy CA where they point and
// names the ui port; the ui Service reaches that port on the main instance's pods only; a
// ClusterRole bound to the manager grants impersonation of users and groups and the
// SubjectAccessReviews; the NetworkPolicy opens the port. With ui off none of it is rendered and
// no UI flag is passed.
func TestUIRendersWhenEnabled(t *testing.T) {
	m := render(t, "siteops", namespace, values(t, uiOn+"\nshards: [shard1]"))
	ds := deploymentsByName(t, m)
	d, sh := ds["siteops-manager"], ds["siteops-manager-shard1"]
	if d == nil || sh == nil {
		t.Fatalf("Deployments %v, want the main instance and shard1", slices.Sorted(maps.Keys(ds)))
	}

	fs, o := parseArgs(t, d)
	for _, f := range []string{"ui-bind-address", "ui-cert-dir", "ui-proxy-ca-file", "ui-proxy-names"} {
		if !fs.Changed(f) {
			t.Errorf("the main instance is not passed --%s: %q", f, uiArgs(d))
		}
	}
	if o.UI.BindAddress != ":9446" || !slices.Equal(o.UI.ProxyNames, []string{"oauth2-proxy"}) {
		t.Errorf("--ui-bind-address %q, --ui-proxy-names %q; want :9446 and [oauth2-proxy]", o.UI.BindAddress, o.UI.ProxyNames)
	}
	if err := o.UI.Validate(); err != nil || !o.UI.Enabled() {
		t.Errorf("the manager would not serve the UI with the rendered flags (enabled %v): %v", o.UI.Enabled(), err)
	}
	if p := containerPort(d, "ui"); p != 9446 {
		t.Errorf("ui container port %d, the manager listens on %s", p, o.UI.BindAddress)
	}
	mounted := func(dir, secret string, keys ...string) {
		t.Helper()
		v := volumeAt(d, dir)
		if v == nil || v.Secret == nil || v.Secret.SecretName != secret {
			t.Errorf("at %s the manager mounts %+v, want Secret %s", dir, v, secret)
			return
		}
		var got []string
		for _, it := range v.Secret.Items {
			got = append(got, it.Path)
		}
		if !slices.Equal(got, keys) {
			t.Errorf("Secret %s at %s: files %v, want %v", secret, dir, got, keys)
		}
		for _, vm := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
			if vm.MountPath == dir && !vm.ReadOnly {
				t.Errorf("%s is mounted writable", dir)
			}
		}
	}
	mounted(o.UI.CertDir, "siteops-ui-tls", "tls.crt", "tls.key")
	mounted(path.Dir(o.UI.ProxyCAFile), "siteops-ui-proxy-ca", path.Base(o.UI.ProxyCAFile))
	if path.Base(o.UI.ProxyCAFile) != "ca.crt" {
		t.Errorf("--ui-proxy-ca-file %s, want the Secret's ca.crt", o.UI.ProxyCAFile)
	}

	// The shard serves no UI.
	if a := uiArgs(sh); len(a) != 0 || containerPort(sh, "ui") != -1 {
		t.Errorf("shard1 serves the UI: args %q, ui port %d", a, containerPort(sh, "ui"))
	}
	for _, v := range sh.Spec.Template.Spec.Volumes {
		if strings.HasPrefix(v.Name, "ui-") {
			t.Errorf("shard1 mounts %s", v.Name)
		}
	}

	var svc corev1.Service
	if !m.get(t, "Service", "siteops-ui", &svc) {
		t.Fatal("no Service siteops-ui")
	}
	if !selects(svc.Spec.Selector, d.Spec.Template.Labels) || selects(svc.Spec.Selector, sh.Spec.Template.Labels) {
		t.Errorf("Service siteops-ui selector %v: want the main instance's pods %v only, not shard1's %v", svc.Spec.Selector, d.Spec.Template.Labels, sh.Spec.Template.Labels)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "ui" || svc.Spec.Ports[0].Port != 443 || svc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("Service siteops-ui: %s %+v, want ClusterIP port 443 to targetPort ui", svc.Spec.Type, svc.Spec.Ports)
	}

	var ui *grant
	for _, g := range grants(t, m) {
		if g.role == "siteops-ui" && g.scope == "cluster-wide" {
			ui = &g
		}
	}
	if ui == nil {
		t.Fatal("no ClusterRole siteops-ui bound to the manager's ServiceAccount")
	}
	for _, r := range uiRights {
		if !covered(r, ui.rules) {
			t.Errorf("ClusterRole siteops-ui does not grant %v %v/%v: %+v", r.Verbs, r.APIGroups, r.Resources, ui.rules)
		}
	}

	var np networkingv1.NetworkPolicy
	if !m.get(t, "NetworkPolicy", networkPolicyName, &np) || len(ingressPorts(t, np)["ui"]) == 0 {
		t.Errorf("the NetworkPolicy does not open the ui port: %+v", np.Spec.Ingress)
	}
	if m.get(t, "Ingress", "siteops-ui", nil) {
		t.Error("ui.ingress is off, yet an Ingress is rendered")
	}

	// ui.ingress: one path, everything, to the ui Service.
	var ing networkingv1.Ingress
	if !render(t, "siteops", namespace, values(t, "ui: {enabled: true, certSecret: tls, proxyCASecret: ca, ingress: {enabled: true, className: nginx, host: siteops.example.com}}")).get(t, "Ingress", "siteops-ui", &ing) {
		t.Fatal("ui.ingress.enabled renders no Ingress siteops-ui")
	}
	if r := ing.Spec.Rules[0]; r.Host != "siteops.example.com" || r.HTTP.Paths[0].Backend.Service.Name != "siteops-ui" || r.HTTP.Paths[0].Backend.Service.Port.Name != "ui" {
		t.Errorf("Ingress siteops-ui does not send siteops.example.com to the ui Service: %+v", r)
	}

	// helm install says where the proxy connects, and warns while any certificate of the CA is
	// taken for the proxy.
	rel, err := newInstall("siteops", namespace).Run(loadChart(t), values(t, "ui: {enabled: true, certSecret: tls, proxyCASecret: ca}"))
	if err != nil {
		t.Fatal(err)
	}
	if n := rel.Info.Notes; !strings.Contains(n, "https://siteops-ui.siteops-system.svc)") || !strings.Contains(n, "ui.proxyNames is empty") {
		t.Errorf("notes do not point the proxy at the ui Service or warn about ui.proxyNames:\n%s", n)
	}

	// Off (the default): nothing of the UI, whatever ui.ingress says.
	for name, doc := range map[string]string{
		"default":             "",
		"ingress, ui off":     "ui: {ingress: {enabled: true}, certSecret: tls, proxyCASecret: ca}",
		"shards, ui off":      "shards: [shard1]",
		"self-signed, ui off": valueSets["self-signed"],
	} {
		off := render(t, "siteops", namespace, values(t, doc))
		for _, kind := range []string{"Service", "Ingress", "ClusterRole", "ClusterRoleBinding"} {
			if off.get(t, kind, "siteops-ui", nil) {
				t.Errorf("%s: ui is off, yet %s siteops-ui is rendered", name, kind)
			}
		}
		for _, d := range deploymentsByName(t, off) {
			if a := uiArgs(d); len(a) != 0 || containerPort(d, "ui") != -1 {
				t.Errorf("%s: ui is off, yet %s gets args %q and ui port %d", name, d.Name, a, containerPort(d, "ui"))
			}
			for _, v := range d.Spec.Template.Spec.Volumes {
				if strings.HasPrefix(v.Name, "ui-") {
					t.Errorf("%s: ui is off, yet %s mounts %s", name, d.Name, v.Name)
				}
			}
		}
		for _, g := range grants(t, off) {
			for _, r := range g.rules {
				if slices.Contains(r.Verbs, "impersonate") {
					t.Errorf("%s: ui is off, yet %s grants %+v", name, g.role, r)
				}
			}
		}
	}
}

// TestUIValuesRefused: the chart refuses UI values the manager would refuse or that could not
// work, naming the value to set.
func TestUIValuesRefused(t *testing.T) {
	for doc, want := range map[string]string{
		"ui: {enabled: true, proxyCASecret: ca}":            "ui.certSecret is required",
		"ui: {enabled: true, certSecret: tls}":              "ui.proxyCASecret or ui.oidc.issuerURL is required",
		oidcOn("clientID: ''"):                              "ui.oidc.clientID is required",
		oidcOn("secret: ''"):                                "ui.oidc.secret is required",
		oidcOn("redirectURL: https://siteops.example.com/"): "/ui/oidc/redirectURL",
		oidcOn("redirectURL: ''"):                           "ui.oidc.redirectURL is required",
		`flags: {ui-bind-address: ":9446"}`:                 "ui.enabled is false",
		auditOn("{}") + "\nui: {enabled: true, certSecret: a, proxyCASecret: b, port: 9444}": "flags.audit-listen-address",
		uiOn + "\nflags: {ui-bind-address: \"0\"}":                                           "turns the UI off",
		uiOn + "\nflags: {webhook-port: 9446}":                                               "flags.webhook-port",
	} {
		_, err := newInstall("siteops", namespace).Run(loadChart(t), values(t, doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error naming %q", doc, err, want)
		}
	}
	// Certificates mounted by hand (extraVolumes) are named by their flags instead.
	if _, err := newInstall("siteops", namespace).Run(loadChart(t), values(t, "ui: {enabled: true}\nflags: {ui-cert-dir: /certs, ui-proxy-ca-file: /ca/ca.crt}")); err != nil {
		t.Errorf("ui with its flags set: %v", err)
	}
}

// oidcOn turns the web UI on with OIDC sign-in alone; more are YAML keys of ui.oidc that
// replace the complete ones.
func oidcOn(more ...string) string {
	return "ui: {enabled: true, certSecret: siteops-ui-tls, oidc: {issuerURL: https://dex.example.com, clientID: siteops, " +
		"redirectURL: https://siteops.example.com/auth/callback, secret: siteops-ui-oidc, groupsPrefix: 'oidc:'" + strings.Join(append([]string{""}, more...), ", ") + "}}"
}

// TestUIOIDCRenders: with ui.oidc the main instance (not a shard) passes the OIDC flags, the
// client and cookie secrets as files of the mounted Secret, and no proxy CA, which OIDC does not
// need; beside ui.proxyCASecret both are passed. The manager accepts both flag sets, and the
// notes say where people sign in.
func TestUIOIDCRenders(t *testing.T) {
	m := render(t, "siteops", namespace, values(t, oidcOn()+"\nshards: [shard1]"))
	ds := deploymentsByName(t, m)
	d, sh := ds["siteops-manager"], ds["siteops-manager-shard1"]
	fs, o := parseArgs(t, d)
	if err := o.UI.Validate(); err != nil || !o.UI.Enabled() {
		t.Fatalf("the manager would not serve the UI with the rendered flags %q: %v", uiArgs(d), err)
	}
	want := ui.OIDCOptions{IssuerURL: "https://dex.example.com", ClientID: "siteops", RedirectURL: "https://siteops.example.com/auth/callback",
		ClientSecretFile: "/etc/siteops/ui/oidc/client-secret", CookieSecretFile: "/etc/siteops/ui/oidc/cookie-secret",
		UsernameClaim: "email", GroupsClaim: "groups", GroupsPrefix: "oidc:"}
	if o.UI.OIDC != want {
		t.Errorf("OIDC options %+v, want %+v", o.UI.OIDC, want)
	}
	if fs.Changed("ui-proxy-ca-file") || fs.Changed("ui-oidc-username-prefix") || fs.Changed("ui-oidc-ca-file") {
		t.Errorf("flags passed that no value asked for: %q", uiArgs(d))
	}
	v := volumeAt(d, "/etc/siteops/ui/oidc")
	if v == nil || v.Secret == nil || v.Secret.SecretName != "siteops-ui-oidc" || len(v.Secret.Items) != 2 ||
		v.Secret.Items[0].Key != "client-secret" || v.Secret.Items[1].Key != "cookie-secret" {
		t.Errorf("at /etc/siteops/ui/oidc the manager mounts %+v, want Secret siteops-ui-oidc's client-secret and cookie-secret", v)
	}
	if a := uiArgs(sh); len(a) != 0 {
		t.Errorf("shard1 is passed UI flags: %q", a)
	}
	for _, v := range sh.Spec.Template.Spec.Volumes {
		if strings.HasPrefix(v.Name, "ui-") {
			t.Errorf("shard1 mounts %s", v.Name)
		}
	}

	// Beside the proxy.
	both := render(t, "siteops", namespace, values(t, oidcOn()+"\nflags: {ui-oidc-ca-file: /etc/dex-ca/ca.crt}"))
	fs, o = parseArgs(t, both.deployment(t))
	_ = fs
	if err := o.UI.Validate(); err != nil || o.UI.OIDC.CAFile != "/etc/dex-ca/ca.crt" {
		t.Errorf("OIDC with the issuer's CA: %v, CA %q", err, o.UI.OIDC.CAFile)
	}
	withProxy := strings.Replace(oidcOn(), "certSecret: siteops-ui-tls,", "certSecret: siteops-ui-tls, proxyCASecret: siteops-ui-proxy-ca,", 1)
	fs, o = parseArgs(t, render(t, "siteops", namespace, values(t, withProxy)).deployment(t))
	if err := o.UI.Validate(); err != nil || !fs.Changed("ui-proxy-ca-file") || o.UI.OIDC.IssuerURL == "" {
		t.Errorf("OIDC beside the proxy: %v, proxy CA %q, issuer %q", err, o.UI.ProxyCAFile, o.UI.OIDC.IssuerURL)
	}

	rel, err := newInstall("siteops", namespace).Run(loadChart(t), values(t, oidcOn()))
	if err != nil {
		t.Fatal(err)
	}
	if n := rel.Info.Notes; !strings.Contains(n, "https://dex.example.com") || !strings.Contains(n, "open https://siteops.example.com/") || strings.Contains(n, "proxyNames") {
		t.Errorf("notes do not say where people sign in, or speak of a proxy there is none of:\n%s", n)
	}
}

// TestUIServesWithChartRBAC runs the manager with the UI flags the chart renders, as the chart's
// ServiceAccount, with the Decofile part alone (whose role neither lists Namespaces nor reads
// GitTargets and WatchRules, which the UI watches): the UI serves, shows a person a Decofile
// their Role lets them read, refuses it to someone else, and suspends it as that person
// (impersonation), not as the manager. The manager runs with the ServiceAccount's token.
func TestUIServesWithChartRBAC(t *testing.T) {
	c := testenv.APIServer(t)
	ns := c.Namespace(t, "siteops", nil)
	m := install(t, c, ns, values(t, "flags: {controllers: [decofile], decofile-disable-injection: true}\n"+uiOn))
	_, o := parseArgs(t, m.deployment(t))
	if !o.UI.Enabled() {
		t.Fatal("the rendered flags do not turn the UI on")
	}
	// What the pod would have: its mounted certificates, its ports, its namespace.
	mtls := testenv.NewMTLS(t, "oauth2-proxy", "127.0.0.1")
	o.UI.BindAddress, o.UI.CertDir, o.UI.ProxyCAFile = testenv.FreeLoopbackAddr(t), mtls.CertDir, mtls.CAFile
	o.LeaderElectionNamespace = ns
	o.MetricsAddr, o.ProbeAddr = "0", "0"
	o.WebhookHost, o.WebhookPort, o.WebhookCertDir = "127.0.0.1", freePort(t), t.TempDir()
	o.SecondInProcess = true
	// The ServiceAccount's own token, not impersonation of it: the UI replaces the config's
	// impersonation with the person's, which must then be the ServiceAccount's right.
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: ns + "-manager"}}
	tr := &authenticationv1.TokenRequest{}
	if err := c.Client.SubResource("token").Create(t.Context(), sa, tr); err != nil {
		t.Fatalf("a token for the chart's ServiceAccount: %v", err)
	}
	cfg := rest.AnonymousClientConfig(c.Config)
	cfg.BearerToken = tr.Status.Token
	mgr, err := manager.New(cfg, *o)
	if err != nil {
		t.Fatalf("the manager does not start with the chart's permissions: %v", err)
	}
	testenv.StartManager(t, mgr)
	testenv.Eventually(t, 30*time.Second, func() error {
		conn, err := net.Dial("tcp", o.UI.BindAddress)
		if err == nil {
			conn.Close()
		}
		return err
	})

	site := c.Namespace(t, "ui-site", nil)
	d := &decov1.Decofile{ObjectMeta: metav1.ObjectMeta{Namespace: site, Name: "shop"},
		Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: &decov1.InlineSource{
			Value: map[string]apiextensionsv1.JSON{"site": {Raw: []byte(`{"name":"shop"}`)}},
		}}}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: site, Name: "sites"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{decov1.GroupVersion.Group}, Resources: []string{"decofiles"}, Verbs: []string{"get", "list", "watch", "patch"}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: site, Name: "jane-sites"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "sites"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "jane"}}}
	for _, obj := range []client.Object{d, role, binding} {
		if err := c.Client.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}

	// The authenticating proxy: its client certificate, and the person in its headers.
	proxy := &http.Client{
		Transport:     &http.Transport{TLSClientConfig: mtls.ClientTLS(t)},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	as := func(user, method, p string) (int, string, error) {
		req, err := http.NewRequest(method, "https://"+o.UI.BindAddress+p, nil)
		if err != nil {
			return 0, "", err
		}
		req.Header.Set("X-Remote-User", user)
		res, err := proxy.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return res.StatusCode, string(b), err
	}
	page := "/namespaces/" + site + "/decofiles/shop"
	testenv.Eventually(t, 30*time.Second, func() error {
		code, body, err := as("jane", http.MethodGet, page)
		if err == nil && (code != http.StatusOK || !strings.Contains(body, "shop")) {
			err = fmt.Errorf("jane gets HTTP %d for %s", code, page)
		}
		return err
	})
	if code, _, err := as("mallory", http.MethodGet, page); err != nil || code != http.StatusForbidden {
		t.Errorf("mallory, who has no Role, gets HTTP %d (%v) for %s, want 403", code, err, page)
	}
	suspended := func() bool {
		var got decov1.Decofile
		if err := c.Client.Get(t.Context(), client.ObjectKeyFromObject(d), &got); err != nil {
			t.Fatal(err)
		}
		return got.Spec.Suspend
	}
	if code, _, err := as("mallory", http.MethodPost, page+"/suspend"); err != nil || code < 400 || suspended() {
		t.Errorf("mallory's suspend: HTTP %d (%v), suspended %v; want it refused as mallory", code, err, suspended())
	}
	if code, _, err := as("jane", http.MethodPost, page+"/suspend"); err != nil || code >= 400 || !suspended() {
		t.Errorf("jane's suspend: HTTP %d (%v), suspended %v; want it done as jane", code, err, suspended())
	}
}
