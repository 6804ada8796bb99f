package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/kube"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

const (
	// leaseName is the chart's default flags.leader-election-id.
	leaseName = "siteops-manager.siteops.dev"
	// auditPort is the chart's default flags.audit-listen-address port.
	auditPort = 9444
	// compressionThreshold is lowered from the 2.5 MB default so the large-content step stays
	// quick; the code path is the same.
	compressionThreshold = 256 << 10
	// auditCertDir is where the manager reads the audit receiver's certificate.
	auditCertDir = "/etc/siteops/audit"
)

// chartValues are the values a platform team would set for this cluster: the local images,
// self-signed webhooks, the servers on the node's address allowed as sources and git remotes,
// and attribution with the receiver's certificate from a Secret.
func (e *env) chartValues() map[string]any {
	repo, tag, _ := strings.Cut(e.managerRef, ":")
	private := []any{e.n.IP}
	return map[string]any{
		"image": map[string]any{"repository": repo, "tag": tag, "pullPolicy": "Never"},
		"flags": map[string]any{
			"webhook-self-signed":      true,
			"source-allowed-schemes":   []any{"https", "ssh", "http"},
			"source-allowed-hosts":     private,
			"compression-threshold":    compressionThreshold,
			"valkey-url":               "redis://" + e.valkey.Addr,
			"redis-addr":               e.redis.Addr,
			"git-allowed-schemes":      []any{"https", "ssh", "http"},
			"git-allowed-hosts":        private,
			"author-attribution":       true,
			"author-attribution-route": auditRoute,
			"audit-cert-dir":           auditCertDir,
			"audit-client-ca":          auditCertDir + "/ca.crt",
			// Required with redis-addr; this API server presents no admission client
			// certificate, and no step makes a CommitRequest.
			"commitrequest-webhook-client-ca": auditCertDir + "/ca.crt",
		},
		"secrets": map[string]any{
			"valkeyAdminPassword": map[string]any{"name": "valkey-admin", "key": "password"},
			"redisPassword":       map[string]any{"name": "mirror-redis", "key": "password"},
		},
		"extraVolumes":      []any{map[string]any{"name": "audit-certs", "secret": map[string]any{"secretName": "audit-certs"}}},
		"extraVolumeMounts": []any{map[string]any{"name": "audit-certs", "mountPath": auditCertDir, "readOnly": true}},
	}
}

// installChart is step 1: `helm install --wait` with the Helm Go SDK.
func (e *env) installChart(t *testing.T) {
	ctx := context.Background()
	// Not one of e.namespaces: it goes after the uninstall.
	e.release = e.c.Namespace(e.top, "siteops", nil)
	certs := map[string][]byte{}
	for _, f := range []string{"tls.crt", "tls.key", "ca.crt"} {
		b, err := os.ReadFile(filepath.Join(auditCerts.CertDir, f))
		must(t, err, "read audit certificate")
		certs[f] = b
	}
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "audit-certs", Namespace: e.release}, Data: certs},
		{ObjectMeta: metav1.ObjectMeta{Name: "valkey-admin", Namespace: e.release}, StringData: map[string]string{"password": e.valkeyPassword}},
		{ObjectMeta: metav1.ObjectMeta{Name: "mirror-redis", Namespace: e.release}, StringData: map[string]string{"password": e.redisPassword}},
	} {
		must(t, e.c.Client.Create(ctx, s), "create Secret %s", s.Name)
	}

	flags := kube.GetConfig(e.kc, "", e.release)
	// Not the discovery cache in ~/.kube: the test leaves nothing on the machine.
	cacheDir := e.top.TempDir()
	flags.CacheDir = &cacheDir
	cfg := &action.Configuration{}
	must(t, cfg.Init(flags, e.release, "secret", func(string, ...any) {}), "helm configuration")
	chart, err := loader.Load(filepath.Join("..", "..", "charts", "siteops"))
	must(t, err, "load chart")
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace = "siteops", e.release
	install.Wait, install.Timeout = true, 2*time.Minute
	start := time.Now()
	rel, err := install.Run(chart, e.chartValues())
	if err != nil {
		e.dumpManagers(t)
		t.Fatalf("helm install: %v", err)
	}
	t.Logf("helm install --wait returned after %s (release %s, chart %s)", time.Since(start).Round(time.Millisecond), rel.Name, rel.Chart.Metadata.Version)
	e.top.Cleanup(func() {
		t := e.top
		// The manager removes the finalizers it put on the steps' namespaces, so they go first.
		e.deleteNamespaces(t)
		e.relayOff()
		if _, err := action.NewUninstall(cfg).Run("siteops"); err != nil {
			t.Errorf("helm uninstall: %v", err)
		}
	})

	var d appsv1.Deployment
	must(t, e.c.Client.Get(ctx, client.ObjectKey{Namespace: e.release, Name: "siteops-manager"}, &d), "get the manager Deployment")
	if d.Status.ReadyReplicas != 2 || ptr.Deref(d.Spec.Replicas, 0) != 2 {
		t.Fatalf("manager Deployment: %d of %d replicas Ready, want 2", d.Status.ReadyReplicas, ptr.Deref(d.Spec.Replicas, 0))
	}
	pods := e.managerPods(t)
	holder := ""
	took := waitFor(t, 60*time.Second, "a manager pod holds the Lease", func(ctx context.Context) error {
		holder = e.leaseHolder(ctx)
		for _, p := range pods {
			if holder == p.Name {
				return nil
			}
		}
		return fmt.Errorf("Lease holder %q is none of the manager pods", holder)
	})
	t.Logf("manager pod %s holds the Lease (%s after helm returned)", holder, took.Round(time.Millisecond))
	e.relayToManagers()

	// Self-signed mode: the manager patched the caBundle of the configurations the chart made,
	// which name the chart's Service; the API server calls the injection webhook through it.
	var m admissionregistrationv1.MutatingWebhookConfiguration
	waitFor(t, 30*time.Second, "caBundle patched", func(ctx context.Context) error {
		if err := e.c.Client.Get(ctx, client.ObjectKey{Name: "siteops-decofile-inject"}, &m); err != nil {
			return err
		}
		if len(m.Webhooks) == 0 || len(m.Webhooks[0].ClientConfig.CABundle) == 0 {
			return fmt.Errorf("caBundle not patched yet")
		}
		return nil
	})
	if svc := m.Webhooks[0].ClientConfig.Service; svc == nil || svc.Namespace != e.release || svc.Name != "siteops-webhook-service" {
		t.Fatalf("the injection webhook does not call the chart's Service: %+v", m.Webhooks[0].ClientConfig)
	}
	w := &warnings{}
	rc := rest.CopyConfig(e.c.Config)
	rc.WarningHandler = w
	cs, err := kubernetes.NewForConfig(rc)
	must(t, err, "clientset")
	probeNS := e.namespace(t, "webhook", nil)
	took = waitFor(t, 60*time.Second, "the injection webhook answers through its Service", func(ctx context.Context) error {
		// Dry run: the webhook (sideEffects None) is called, nothing is stored.
		_, err := cs.AppsV1().Deployments(probeNS).Create(ctx, siteDeployment(probeNS, "probe", "missing", e.siteRef, e.n.Name, 0),
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if !strings.Contains(w.all(), `Decofile "missing" not found`) {
			return fmt.Errorf("no warning from the injection webhook; warnings: %q", w.all())
		}
		return nil
	})
	t.Logf("the API server reached the injection webhook through the Service (%s)", took.Round(time.Millisecond))
}

// managerPods are the Running manager pods that are not being deleted.
func (e *env) managerPods(t *testing.T) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	must(t, e.c.Client.List(context.Background(), &list, client.InNamespace(e.release),
		client.MatchingLabels{"app.kubernetes.io/name": "siteops", "app.kubernetes.io/instance": "siteops"}), "list manager pods")
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			out = append(out, p)
		}
	}
	return out
}

// leaseHolder is the pod name in the leader Lease's holder identity (<pod>_<uuid>), or "".
func (e *env) leaseHolder(ctx context.Context) string {
	var l coordinationv1.Lease
	if err := e.c.Client.Get(ctx, client.ObjectKey{Namespace: e.release, Name: leaseName}, &l); err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	name, _, _ := strings.Cut(*l.Spec.HolderIdentity, "_")
	return name
}

// relayToManagers points the audit relay at a Ready manager pod's audit port.
func (e *env) relayToManagers() {
	auditRelay.setTarget(func() (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		var list corev1.PodList
		if err := e.c.Client.List(ctx, &list, client.InNamespace(e.release),
			client.MatchingLabels{"app.kubernetes.io/name": "siteops", "app.kubernetes.io/instance": "siteops"}); err != nil {
			return "", err
		}
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && p.Status.PodIP != "" && podReady(&p) {
				return hostPort(p.Status.PodIP, auditPort), nil
			}
		}
		return "", errNoTarget
	})
}

func (e *env) relayOff() { auditRelay.setTarget(nil) }

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// dumpManagers logs the manager pods' states and last log lines.
func (e *env) dumpManagers(t *testing.T) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(e.c.Config)
	if err != nil {
		return
	}
	ctx := context.Background()
	var list corev1.PodList
	_ = e.c.Client.List(ctx, &list, client.InNamespace(e.release))
	for _, p := range list.Items {
		logs, _ := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: ptr.To[int64](30)}).DoRaw(ctx)
		t.Logf("pod %s: %s %+v\n%s", p.Name, p.Status.Phase, p.Status.ContainerStatuses, logs)
	}
}

// warnings collects the API server's warnings to one client.
type warnings struct {
	mu   sync.Mutex
	text []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.text = append(w.text, text)
}

func (w *warnings) all() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.text, "\n")
}

// siteDeployment is a Deployment of the site runtime asking for Decofile decofile, on the node.
func siteDeployment(ns, name, decofile, image, nodeName string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Annotations: map[string]string{decov1alpha1.AnnotationInject: decofile}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector:                  map[string]string{corev1.LabelHostname: nodeName},
					AutomountServiceAccountToken:  ptr.To(false),
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers: []corev1.Container{{
						Name: "app", Image: image, ImagePullPolicy: corev1.PullNever,
						Args:  []string{"--addr", "0.0.0.0:8000"},
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8000}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/.decofile", Port: intstrPort(8000)}},
							PeriodSeconds: 1,
						},
					}},
				},
			},
		},
	}
}
