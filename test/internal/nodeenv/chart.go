package nodeenv

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/kube"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/testenv"
)

const (
	// LeaseName is the chart's default flags.leader-election-id.
	LeaseName = "siteops-manager.siteops.dev"
	// AuditPort is the chart's default flags.audit-listen-address port.
	AuditPort = 9444
	// MetricsPort is the chart's default flags.metrics-bind-address port.
	MetricsPort = 8080
	// CompressionThreshold is lowered from the 2.5 MB default so large content stays quick to
	// make; the code path is the same.
	CompressionThreshold = 256 << 10
	// SitePort is where the site runtime listens in its pods.
	SitePort = 8000
	// auditCertDir is where the manager reads the audit receiver's certificate.
	auditCertDir = "/etc/siteops/audit"
)

// managerLabels select the manager pods of the release.
var managerLabels = client.MatchingLabels{"app.kubernetes.io/name": "siteops", "app.kubernetes.io/instance": "siteops"}

// ChartValues are the values a platform team would set for this cluster (the local images,
// self-signed webhooks, the servers on the node's address allowed as sources and git remotes),
// with ClusterValues over them.
func (e *Env) ChartValues() map[string]any {
	repo, tag, _ := strings.Cut(e.ManagerRef, ":")
	private := []any{e.N.IP}
	flags := map[string]any{
		"webhook-self-signed":  true,
		"source-allowed-hosts": private,
		"redis-addr":           e.Redis.Addr,
		"git-allowed-hosts":    private,
	}
	if e.ValkeySet != nil {
		var addrs []any
		for _, a := range e.ValkeySet.SentinelAddrs() {
			addrs = append(addrs, a)
		}
		flags["valkey-sentinel-addrs"] = addrs
		flags["valkey-sentinel-master"] = e.ValkeySet.MasterName
	} else {
		flags["valkey-url"] = "redis://" + e.Valkey.Addr
	}
	secrets := map[string]any{
		"valkeyAdminPassword": map[string]any{"name": "valkey-admin", "key": "password"},
		"redisPassword":       map[string]any{"name": "mirror-redis", "key": "password"},
	}
	if e.S3 != nil {
		maps.Copy(flags, e.S3.chartFlags())
		secrets["s3Credentials"] = map[string]any{"name": s3CredentialsSecret}
	}
	platform := map[string]any{
		"image":   map[string]any{"repository": repo, "tag": tag, "pullPolicy": "Never"},
		"flags":   flags,
		"secrets": secrets,
	}
	return chartutil.CoalesceTables(ClusterValues(), platform)
}

// ClusterValues are what this test cluster needs on top of a platform team's values: git over
// plain HTTP on the node's address, a lower compression threshold, and attribution with the
// receiver's certificate from the Secret CreateAuditSecret makes (the API server's audit
// webhook was configured with it before the cluster existed, so the chart cannot make it).
func ClusterValues() map[string]any {
	return map[string]any{
		"flags": map[string]any{
			"source-allowed-schemes":   []any{"https", "ssh", "http"},
			"git-allowed-schemes":      []any{"https", "ssh", "http"},
			"compression-threshold":    CompressionThreshold,
			"author-attribution":       true,
			"author-attribution-route": AuditRoute,
			"audit-cert-dir":           auditCertDir,
			"audit-client-ca":          auditCertDir + "/ca.crt",
			// The API server presents the audit client certificate to the admission webhooks too.
			"commitrequest-webhook-client-ca": auditCertDir + "/ca.crt",
		},
		"extraVolumes":      []any{map[string]any{"name": "audit-certs", "secret": map[string]any{"secretName": auditSecret}}},
		"extraVolumeMounts": []any{map[string]any{"name": "audit-certs", "mountPath": auditCertDir, "readOnly": true}},
	}
}

// auditSecret holds the audit receiver's certificate in the release's namespace.
const auditSecret = "audit-certs"

// CreateAuditSecret creates the Secret ClusterValues mounts in namespace ns: the audit
// receiver's certificate, which the API server's audit webhook trusts.
func (e *Env) CreateAuditSecret(t testing.TB, ns string) {
	t.Helper()
	certs := map[string][]byte{}
	for _, f := range []string{"tls.crt", "tls.key", "ca.crt"} {
		b, err := os.ReadFile(filepath.Join(auditCerts.CertDir, f))
		Must(t, err, "read audit certificate")
		certs[f] = b
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: auditSecret, Namespace: ns}, Data: certs}
	Must(t, e.C.Client.Create(context.Background(), s), "create Secret %s", s.Name)
}

// InstallChart is `helm install --wait` of the chart with values, with the Helm Go SDK, into a
// namespace of its own, then Installed's checks.
func (e *Env) InstallChart(t *testing.T, values map[string]any) {
	ctx := context.Background()
	// Not one of e.namespaces: it goes after the uninstall.
	ns := e.C.Namespace(e.T, "siteops", nil)
	e.CreateAuditSecret(t, ns)
	secrets := []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "valkey-admin", Namespace: ns}, StringData: map[string]string{"password": e.ValkeyPassword}},
		{ObjectMeta: metav1.ObjectMeta{Name: "mirror-redis", Namespace: ns}, StringData: map[string]string{"password": e.RedisPassword}},
	}
	if e.S3 != nil {
		secrets = append(secrets, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: s3CredentialsSecret, Namespace: ns},
			StringData: map[string]string{"AWS_ACCESS_KEY_ID": e.S3.AccessKey, "AWS_SECRET_ACCESS_KEY": e.S3.SecretKey}})
	}
	for _, s := range secrets {
		Must(t, e.C.Client.Create(ctx, s), "create Secret %s", s.Name)
	}

	cfg := e.helmConfig(t, ns)
	// The tests using this package sit two folders under the module root.
	chart, err := loader.Load(filepath.Join("..", "..", "charts", "siteops"))
	Must(t, err, "load chart")
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace = ReleaseName, ns
	install.Wait, install.Timeout = true, 2*time.Minute
	start := time.Now()
	rel, err := install.Run(chart, values)
	if err != nil {
		e.Release = ns
		e.DumpManagers(t)
		t.Fatalf("helm install: %v", err)
	}
	t.Logf("helm install --wait returned after %s (release %s, chart %s)", time.Since(start).Round(time.Millisecond), rel.Name, rel.Chart.Metadata.Version)
	e.Installed(t, ns)
}

// ReleaseName is the chart's release name in every test.
const ReleaseName = "siteops"

// helmConfig is the Helm SDK's configuration for namespace ns as the admin.
func (e *Env) helmConfig(t testing.TB, ns string) *action.Configuration {
	flags := kube.GetConfig(e.KC, "", ns)
	// Not the discovery cache in ~/.kube: the test leaves nothing on the machine.
	cacheDir := e.T.TempDir()
	flags.CacheDir = &cacheDir
	cfg := &action.Configuration{}
	Must(t, cfg.Init(flags, ns, "secret", func(string, ...any) {}), "helm configuration")
	return cfg
}

// Installed takes over the release ReleaseName installed in namespace ns (by InstallChart, or
// by commands a test ran): it is uninstalled when the whole test ends, after the tests'
// namespaces are gone. It checks that both replicas are Ready, one holds the Lease, and the
// injection webhook answers through the chart's Service, and points the audit relay at the
// manager pods.
func (e *Env) Installed(t *testing.T, ns string) {
	ctx := context.Background()
	e.Release = ns
	cfg := e.helmConfig(t, ns)
	e.T.Cleanup(func() {
		t := e.T
		// The manager removes the finalizers it put on the tests' namespaces, so they go first.
		e.deleteNamespaces(t)
		auditRelay.setTarget(nil)
		if _, err := action.NewUninstall(cfg).Run(ReleaseName); err != nil {
			t.Errorf("helm uninstall: %v", err)
		}
	})

	var d appsv1.Deployment
	Must(t, e.C.Client.Get(ctx, client.ObjectKey{Namespace: e.Release, Name: "siteops-manager"}, &d), "get the manager Deployment")
	if d.Status.ReadyReplicas != 2 || ptr.Deref(d.Spec.Replicas, 0) != 2 {
		t.Fatalf("manager Deployment: %d of %d replicas Ready, want 2", d.Status.ReadyReplicas, ptr.Deref(d.Spec.Replicas, 0))
	}
	pods := e.ManagerPods(t)
	holder := ""
	took := WaitFor(t, 60*time.Second, "a manager pod holds the Lease", func(ctx context.Context) error {
		holder = e.LeaseHolder(ctx)
		for _, p := range pods {
			if holder == p.Name {
				return nil
			}
		}
		return fmt.Errorf("the Lease holder %q is none of the manager pods", holder)
	})
	t.Logf("manager pod %s holds the Lease (%s after helm returned)", holder, took.Round(time.Millisecond))
	e.relayToManagers()

	// Self-signed mode: the manager patched the caBundle of the configurations the chart made,
	// which name the chart's Service; the API server calls the injection webhook through it.
	var m admissionregistrationv1.MutatingWebhookConfiguration
	WaitFor(t, 30*time.Second, "caBundle patched", func(ctx context.Context) error {
		if err := e.C.Client.Get(ctx, client.ObjectKey{Name: "siteops-decofile-inject"}, &m); err != nil {
			return err
		}
		if len(m.Webhooks) == 0 || len(m.Webhooks[0].ClientConfig.CABundle) == 0 {
			return fmt.Errorf("caBundle not patched yet")
		}
		return nil
	})
	if svc := m.Webhooks[0].ClientConfig.Service; svc == nil || svc.Namespace != e.Release || svc.Name != "siteops-webhook-service" {
		t.Fatalf("the injection webhook does not call the chart's Service: %+v", m.Webhooks[0].ClientConfig)
	}
	w := &testenv.Warnings{}
	rc := rest.CopyConfig(e.C.Config)
	rc.WarningHandler = w
	cs, err := kubernetes.NewForConfig(rc)
	Must(t, err, "clientset")
	probeNS := e.Namespace(t, "webhook", nil)
	took = WaitFor(t, 60*time.Second, "the injection webhook answers through its Service", func(ctx context.Context) error {
		// Dry run: the webhook (sideEffects None) is called, nothing is stored.
		_, err := cs.AppsV1().Deployments(probeNS).Create(ctx, e.SiteDeployment(probeNS, "probe", "missing", 0),
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if !strings.Contains(w.All(), `Decofile "missing" not found`) {
			return fmt.Errorf("no warning from the injection webhook; warnings: %q", w.All())
		}
		return nil
	})
	t.Logf("the API server reached the injection webhook through the Service (%s)", took.Round(time.Millisecond))
}

// ManagerPods are the Running manager pods that are not being deleted.
func (e *Env) ManagerPods(t testing.TB) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	Must(t, e.C.Client.List(context.Background(), &list, client.InNamespace(e.Release), managerLabels), "list manager pods")
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			out = append(out, p)
		}
	}
	return out
}

// LeaseHolder is the pod name in the leader Lease's holder identity (<pod>_<uuid>), or "".
func (e *Env) LeaseHolder(ctx context.Context) string {
	var l coordinationv1.Lease
	if err := e.C.Client.Get(ctx, client.ObjectKey{Namespace: e.Release, Name: LeaseName}, &l); err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	name, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
	return name
}

// relayToManagers points the audit relay at a Ready manager pod's audit port.
func (e *Env) relayToManagers() {
	auditRelay.setTarget(func() (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		var list corev1.PodList
		if err := e.C.Client.List(ctx, &list, client.InNamespace(e.Release), managerLabels); err != nil {
			return "", err
		}
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && p.Status.PodIP != "" && PodReady(&p) {
				return HostPort(p.Status.PodIP, AuditPort), nil
			}
		}
		return "", errNoTarget
	})
}

// PodReady reports whether p's Ready condition is True.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// DumpManagers logs the manager pods' states and last log lines.
func (e *Env) DumpManagers(t testing.TB) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(e.C.Config)
	if err != nil {
		return
	}
	ctx := context.Background()
	var list corev1.PodList
	_ = e.C.Client.List(ctx, &list, client.InNamespace(e.Release))
	for _, p := range list.Items {
		logs, _ := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: ptr.To[int64](30)}).DoRaw(ctx)
		t.Logf("pod %s: %s %+v\n%s", p.Name, p.Status.Phase, p.Status.ContainerStatuses, logs)
	}
}

// SiteDeployment is a Deployment of the site runtime asking for Decofile decofile, on the node.
func (e *Env) SiteDeployment(ns, name, decofile string, replicas int32) *appsv1.Deployment {
	return e.deployment(ns, name, map[string]string{decov1alpha1.AnnotationInject: decofile}, replicas, corev1.Container{
		Name: "app", Image: e.SiteRef, ImagePullPolicy: corev1.PullNever,
		Args:  []string{"--addr", fmt.Sprintf("0.0.0.0:%d", SitePort)},
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: SitePort}},
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/.decofile", Port: intstr.FromInt32(SitePort)}},
			PeriodSeconds: 1,
		},
	})
}

// ProbeDeployment is a Deployment "cacheprobe" of one cache probe pod (test/cacheprobe) with
// args, given its tenant's Valkey credentials by the injection webhook, on the node.
func (e *Env) ProbeDeployment(ns string, args ...string) *appsv1.Deployment {
	return e.deployment(ns, "cacheprobe", map[string]string{decov1alpha1.AnnotationValkeyACLInject: "true"}, 1, corev1.Container{
		Name: "probe", Image: ProbeRef, ImagePullPolicy: corev1.PullNever, Args: args,
	})
}

// deployment is a Deployment name of replicas pods of c on the node, labelled app=name.
func (e *Env) deployment(ns, name string, annotations map[string]string, replicas int32, c corev1.Container) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{corev1.LabelHostname: e.N.Name},
					AutomountServiceAccountToken:  ptr.To(false),
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers:                    []corev1.Container{c},
				},
			},
		},
	}
}
