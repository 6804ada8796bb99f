package mirror_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/manager"
	"github.com/siteops/siteops/internal/mirror"
	"github.com/siteops/siteops/internal/mirror/engine"
	"github.com/siteops/siteops/internal/scheme"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// widgetCRD is a namespaced CRD with a status subresource whose spec keeps unknown fields.
var widgetCRD = &apiextensionsv1.CustomResourceDefinition{
	ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
	Spec: apiextensionsv1.CustomResourceDefinitionSpec{
		Group: "example.com",
		Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
		Scope: apiextensionsv1.NamespaceScoped,
		Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
			Name: "v1", Served: true, Storage: true,
			Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
				Type: "object",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"spec":   {Type: "object", XPreserveUnknownFields: ptr(true)},
					"status": {Type: "object", XPreserveUnknownFields: ptr(true)},
				},
			}},
		}},
	},
}

func ptr[T any](v T) *T { return &v }

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.Level(zapLevel())))
	testenv.Main(m, servers.APIServerOptions{ExtraCRDs: []*apiextensionsv1.CustomResourceDefinition{widgetCRD}})
}

// zapLevel logs errors only, unless MIRROR_TEST_DEBUG is set.
func zapLevel() zapcore.Level {
	if os.Getenv("MIRROR_TEST_DEBUG") != "" {
		return zapcore.DebugLevel
	}
	return zapcore.ErrorLevel
}

type clientObject = client.Object

func ref(name string) corev1.LocalObjectReference { return corev1.LocalObjectReference{Name: name} }

func refPtr(name string) *corev1.LocalObjectReference {
	return &corev1.LocalObjectReference{Name: name}
}

func newSecret(ns, name string, data map[string]string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: data}
}

// runManager starts an in-process manager with only the mirror part and returns a stop function
// that waits for it to end.
func runManager(t testing.TB, c *testenv.Cluster, o mirror.Options, probeAddr string) (*engine.Engine, func()) {
	t.Helper()
	return runManagerWith(t, c, o, probeAddr, nil)
}

// runManagerWith is runManager with prep called on the engine before the manager starts.
func runManagerWith(t testing.TB, c *testenv.Cluster, o mirror.Options, probeAddr string, prep func(*engine.Engine)) (*engine.Engine, func()) {
	t.Helper()
	if probeAddr == "" {
		probeAddr = "0"
	}
	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{
		Scheme: scheme.New(),
		// The cache holds what siteops-manager's holds, so memory is measured as it runs.
		Cache:                  manager.CacheOptions(manager.Options{Controllers: []string{manager.PartMirror}}),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: probeAddr,
		LeaderElection:         false,
		// Tests run several managers in one process, one after another.
		Controller: config.Controller{SkipNameValidation: ptr(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	// A check that always passes, so /readyz answers 200 unless a check the mirror added fails.
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		t.Fatal(err)
	}
	eng, err := mirror.SetupWithEngine(mgr, localGit(o))
	if err != nil {
		t.Fatal(err)
	}
	if prep != nil {
		prep(eng)
	}
	return eng, testenv.StartManager(t, mgr)
}

// runWebhookManager starts a manager serving the cluster's webhook install options' port, with
// the mirror set up from localGit(o), and waits until its webhook server is up.
func runWebhookManager(t testing.TB, c *testenv.Cluster, o mirror.Options) *engine.Engine {
	t.Helper()
	wio := c.Env.WebhookInstallOptions
	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{
		Cache:                  manager.CacheOptions(manager.Options{Controllers: []string{manager.PartMirror}}),
		Scheme:                 scheme.New(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr(true)},
		WebhookServer:          webhook.NewServer(webhook.Options{Host: wio.LocalServingHost, Port: wio.LocalServingPort, CertDir: wio.LocalServingCertDir}),
	})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := mirror.SetupWithEngine(mgr, localGit(o))
	if err != nil {
		t.Fatal(err)
	}
	testenv.StartManager(t, mgr)
	testenv.Eventually(t, 30*time.Second, func() error { return mgr.GetWebhookServer().StartedChecker()(nil) })
	return eng
}

// localGit allows what the tests' git remotes need, plain HTTP on loopback, explicitly, as a
// platform allows its internal git host; options that set a URL policy (tests of that policy)
// are kept.
func localGit(o mirror.Options) mirror.Options {
	if o.GitAllowedSchemes == nil && o.GitAllowedHosts == nil {
		o.GitAllowedSchemes = []string{"https", "ssh", "http"}
		o.GitAllowedHosts = []string{"127.0.0.0/8"}
	}
	return o
}

// localGitFlags are localGit's settings as manager flags.
var localGitFlags = []string{"--git-allowed-schemes", "https,ssh,http", "--git-allowed-hosts", "127.0.0.0/8"}

// fixture is a namespace with a GitProvider for a fresh repository on a real git remote.
type fixture struct {
	c        *testenv.Cluster
	ns       string
	url      string
	bare     string
	provider string
}

func newFixture(t testing.TB, c *testenv.Cluster) *fixture {
	t.Helper()
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{Username: "mirror", Password: "pw"})
	name := testenv.Name(t)
	url, err := remote.CreateRepo(name, "main")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{c: c, ns: c.Namespace(t, "mirror", nil), url: url, bare: remote.RepoDir(name), provider: "git"}
	ctx := context.Background()
	// The test API server has no namespace controller: objects of a deleted namespace stay, and a
	// later test's manager would keep mirroring them. Remove the targets explicitly.
	t.Cleanup(func() {
		_ = c.Client.DeleteAllOf(ctx, &mirrorv1alpha1.GitTarget{}, client.InNamespace(f.ns))
		_ = c.Client.DeleteAllOf(ctx, &mirrorv1alpha1.WatchRule{}, client.InNamespace(f.ns))
		_ = c.Client.DeleteAllOf(ctx, &mirrorv1alpha1.GitProvider{}, client.InNamespace(f.ns))
	})
	secret := map[string]string{"username": "mirror", "password": "pw"}
	f.create(t, newSecret(f.ns, "git-auth", secret))
	f.create(t, &mirrorv1alpha1.GitProvider{
		ObjectMeta: metav1.ObjectMeta{Name: f.provider, Namespace: f.ns},
		Spec: mirrorv1alpha1.GitProviderSpec{URL: url, SecretRef: refPtr("git-auth"), AllowedBranches: []string{"main", "mirror/*"},
			Committer: mirrorv1alpha1.Committer{Name: "Mirror Bot", Email: "mirror@example.com"}},
	})
	return f
}

func (f *fixture) create(t testing.TB, o interface {
	GetName() string
}) {
	t.Helper()
	obj, ok := o.(clientObject)
	if !ok {
		t.Fatalf("%T is not a client.Object", o)
	}
	if err := f.c.Client.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %T %s: %v", o, o.GetName(), err)
	}
}

func (f *fixture) target(t testing.TB, name, path string, window time.Duration, deletes mirrorv1alpha1.DeletePolicy) *mirrorv1alpha1.GitTarget {
	t.Helper()
	gt := &mirrorv1alpha1.GitTarget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: mirrorv1alpha1.GitTargetSpec{ProviderRef: ref(f.provider), Branch: "main", Path: path,
			CommitWindow: &metav1.Duration{Duration: window}, Deletes: deletes},
	}
	f.create(t, gt)
	return gt
}

func (f *fixture) watchRule(t testing.TB, name, target string, rules ...mirrorv1alpha1.ResourceRule) {
	t.Helper()
	f.create(t, &mirrorv1alpha1.WatchRule{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec:       mirrorv1alpha1.WatchRuleSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: target}, Rules: rules},
	})
}

func (f *fixture) git(t testing.TB, args ...string) string {
	t.Helper()
	out, err := f.gitErr(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (f *fixture) gitErr(args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"--git-dir", f.bare}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// file returns a file's content on main, or "" when it does not exist.
func (f *fixture) file(path string) string {
	out, err := f.gitErr("show", "main:"+path)
	if err != nil {
		return ""
	}
	return out
}

func (f *fixture) commits() int {
	out, err := f.gitErr("rev-list", "--count", "main")
	if err != nil {
		return 0
	}
	var n int
	fmt.Sscan(out, &n)
	return n
}

func (f *fixture) files(t testing.TB, dir string) []string {
	out, err := f.gitErr("ls-tree", "-r", "--name-only", "main", dir)
	if err != nil || out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

func (f *fixture) waitFile(t testing.TB, path, contains string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		got := f.file(path)
		if got == "" || !strings.Contains(got, contains) {
			return fmt.Errorf("%s = %q, want it to contain %q", path, got, contains)
		}
		return nil
	})
}

func (f *fixture) waitNoFile(t testing.TB, path string) {
	t.Helper()
	testenv.Eventually(t, 30*time.Second, func() error {
		if got := f.file(path); got != "" {
			return fmt.Errorf("%s still exists: %q", path, got)
		}
		return nil
	})
}

func (f *fixture) waitCondition(t testing.TB, target, typ string, status metav1.ConditionStatus, reason string) *mirrorv1alpha1.GitTarget {
	t.Helper()
	var gt mirrorv1alpha1.GitTarget
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := f.c.Client.Get(context.Background(), types.NamespacedName{Namespace: f.ns, Name: target}, &gt); err != nil {
			return err
		}
		c := meta.FindStatusCondition(gt.Status.Conditions, typ)
		if c == nil || c.Status != status || (reason != "" && c.Reason != reason) {
			return fmt.Errorf("condition %s = %+v, want %s/%s", typ, c, status, reason)
		}
		return nil
	})
	return &gt
}
