package s3target_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile"
	"github.com/siteops/siteops/internal/decofile/inject"
	"github.com/siteops/siteops/internal/decofile/s3target"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
	"github.com/siteops/siteops/pkg/siteruntime"
)

const (
	bucket  = "decofiles"
	prefix  = "sites"
	waitFor = 30 * time.Second
)

var webhookPort int

func TestMain(m *testing.M) {
	flag.Parse()
	opts := servers.APIServerOptions{}
	if !testing.Short() {
		var err error
		if webhookPort, err = servers.FreePort("127.0.0.1"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		mwc, vwc := inject.WebhookConfigurations(inject.URLClientConfig("https://127.0.0.1:"+strconv.Itoa(webhookPort), nil))
		opts.Webhooks = envtest.WebhookInstallOptions{
			LocalServingHost:   "127.0.0.1",
			LocalServingPort:   webhookPort,
			MutatingWebhooks:   []*admissionregistrationv1.MutatingWebhookConfiguration{mwc},
			ValidatingWebhooks: []*admissionregistrationv1.ValidatingWebhookConfiguration{vwc},
		}
	}
	testenv.Main(m, opts)
}

// shared is the package's S3 server with a CDN in front of it, and the injection webhook
// configured for that CDN, as an operator with --s3-public-host would configure it.
type shared struct {
	c   *testenv.Cluster
	s3  *servers.S3Server
	cdn *httptest.Server
	// cfg is the s3 target configuration every manager of the shared server uses.
	cfg s3target.Config
}

var (
	sharedOnce sync.Once
	sharedEnv  *shared
	sharedErr  error
)

// setup returns the shared servers with the webhook server running.
func setup(t *testing.T) *shared {
	t.Helper()
	c := testenv.APIServer(t)
	sharedOnce.Do(func() {
		srv, err := servers.StartS3(context.Background(), servers.S3Options{Dir: sharedDir()})
		if err != nil {
			sharedErr = err
			return
		}
		if err := srv.CreateBucket(context.Background(), bucket, true); err != nil {
			sharedErr = err
			return
		}
		origin, _ := url.Parse(srv.Endpoint)
		// The CDN forwards anonymous requests to the path-style bucket over TLS, so the URL the
		// webhook injects (always https) is fetched exactly as a pod would fetch it.
		cdn := httptest.NewTLSServer(httputil.NewSingleHostReverseProxy(origin))
		cfg := s3target.Config{
			Bucket: bucket, Region: srv.Region, Endpoint: srv.Endpoint, PathStyle: true, Prefix: prefix,
			PublicHost: strings.TrimPrefix(cdn.URL, "https://") + "/" + bucket,
		}
		sharedEnv = &shared{c: c, s3: srv, cdn: cdn, cfg: cfg}
		sharedErr = startWebhookServer(c, cfg)
	})
	if sharedErr != nil {
		t.Fatalf("shared servers: %v", sharedErr)
	}
	setCredentials(t, sharedEnv.s3.AccessKey, sharedEnv.s3.SecretKey)
	return sharedEnv
}

// sharedDir is the shared server's data folder: one fixed folder, emptied at start, since the
// server lives as long as the test binary and nothing runs after the tests to remove it.
func sharedDir() string {
	d := filepath.Join(os.TempDir(), "siteops-s3target-test")
	_ = os.RemoveAll(d)
	return d
}

// startWebhookServer serves the injection webhook with the webhook view of cfg.
func startWebhookServer(c *testenv.Cluster, cfg s3target.Config) error {
	return testenv.ServeWebhooks(c, ctrl.Options{}, func(mgr ctrl.Manager) error {
		return inject.Setup(mgr, inject.Options{S3: cfg.Webhook(cfg.Region)})
	})
}

// setCredentials puts the S3 keys where the standard AWS chain finds them (and keeps the
// machine's own AWS files out of it).
func setCredentials(t testing.TB, access, secret string) {
	t.Setenv("AWS_ACCESS_KEY_ID", access)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", os.DevNull)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", os.DevNull)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	// A CA bundle would make the SDK rebuild the transport, which the counting client does not allow.
	t.Setenv("AWS_CA_BUNDLE", "")
}

// counter counts the PutObject requests a manager sends.
type counter struct {
	base http.RoundTripper
	puts atomic.Int64
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/decofile.json") {
		c.puts.Add(1)
	}
	return c.base.RoundTrip(r)
}

// manager runs the Decofile part (delivery, rollout and, with DeleteOnFinalize, the finalizer)
// for one namespace, wired by decofile.Setup as the real manager does; injection is served by
// the shared webhook server.
type manager struct {
	puts *counter
	stop func()
}

func startManager(t *testing.T, c *testenv.Cluster, ns string, cfg s3target.Config) *manager {
	t.Helper()
	cnt := &counter{base: http.DefaultTransport}
	cfg.HTTPClient = &http.Client{Transport: cnt, Timeout: 10 * time.Second}
	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{
		Scheme: c.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Cache:      cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	o := decofile.Options{DisableInjection: true, S3: cfg}
	// The git remotes of these tests are plain http on loopback: allowed explicitly.
	o.Delivery.SourceAllowedSchemes = []string{"https", "ssh", "http"}
	o.Delivery.SourceAllowedHosts = []string{"127.0.0.0/8"}
	o.Rollout.RetryBase = 200 * time.Millisecond
	o.Rollout.Notify.Backoff = 50 * time.Millisecond
	if err := decofile.Setup(mgr, o); err != nil {
		t.Fatal(err)
	}
	return &manager{puts: cnt, stop: testenv.StartManager(t, mgr)}
}

func inlineDecofile(ns, name string, target decov1.TargetType, blocks map[string]string) *decov1.Decofile {
	v := map[string]apiextensionsv1.JSON{}
	for k, raw := range blocks {
		v[k] = apiextensionsv1.JSON{Raw: []byte(raw)}
	}
	return &decov1.Decofile{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       decov1.DecofileSpec{Source: decov1.SourceInline, Target: target, Inline: &decov1.InlineSource{Value: v}},
	}
}

func get(t *testing.T, c *testenv.Cluster, df *decov1.Decofile) *decov1.Decofile {
	t.Helper()
	var d decov1.Decofile
	if err := c.Client.Get(context.Background(), client.ObjectKeyFromObject(df), &d); err != nil {
		t.Fatal(err)
	}
	return &d
}

// update changes the Decofile's spec, retrying on conflicts.
func update(t *testing.T, c *testenv.Cluster, df *decov1.Decofile, change func(*decov1.Decofile)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var d decov1.Decofile
		if err := c.Client.Get(context.Background(), client.ObjectKeyFromObject(df), &d); err != nil {
			return err
		}
		change(&d)
		return c.Client.Update(context.Background(), &d)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func setBlock(name, value string) func(*decov1.Decofile) {
	return func(d *decov1.Decofile) { d.Spec.Inline.Value[name] = apiextensionsv1.JSON{Raw: []byte(value)} }
}

// waitReady waits for Ready with status and reason at the current generation, and for also.
func waitReady(t *testing.T, c *testenv.Cluster, df *decov1.Decofile, status metav1.ConditionStatus, reason string, also func(*decov1.Decofile) error) *decov1.Decofile {
	t.Helper()
	var got *decov1.Decofile
	testenv.Eventually(t, waitFor, func() error {
		got = &decov1.Decofile{}
		if err := c.Client.Get(context.Background(), client.ObjectKeyFromObject(df), got); err != nil {
			return err
		}
		r := meta.FindStatusCondition(got.Status.Conditions, decov1.ConditionReady)
		if r == nil || got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("not reconciled yet: %+v", got.Status)
		}
		if r.Status != status || r.Reason != reason {
			return fmt.Errorf("Ready=%s %s: %s", r.Status, r.Reason, r.Message)
		}
		if also != nil {
			return also(got)
		}
		return nil
	})
	return got
}

// object reads a key from the bucket with the server's root account.
func object(t *testing.T, srv *servers.S3Server, key string) ([]byte, *s3.GetObjectOutput, error) {
	t.Helper()
	out, err := srv.Client(nil).GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return nil, nil, err
	}
	defer out.Body.Close()
	data, err := io.ReadAll(out.Body)
	return data, out, err
}

// hasEvent waits for an event about the Decofile of type typ and reason.
func hasEvent(t *testing.T, c *testenv.Cluster, df *decov1.Decofile, typ, reason, text string) {
	t.Helper()
	testenv.Eventually(t, waitFor, func() error {
		var list eventsv1.EventList
		if err := c.Client.List(context.Background(), &list, client.InNamespace(df.Namespace)); err != nil {
			return err
		}
		var seen []string
		for _, ev := range list.Items {
			if ev.Regarding.Name == df.Name && ev.Type == typ && ev.Reason == reason && strings.Contains(ev.Note, text) {
				return nil
			}
			seen = append(seen, ev.Type+"/"+ev.Reason+": "+ev.Note)
		}
		return fmt.Errorf("no %s event %s containing %q; have %q", typ, reason, text, seen)
	})
}

// deployment is a site's Deployment asking for injection of Decofile decofileName.
func deployment(ns, name, decofileName string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{decov1.AnnotationInject: decofileName}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "site:1"}}},
			},
		},
	}
}

// envOf returns the env of the app container of the stored Deployment.
func envOf(t *testing.T, c *testenv.Cluster, dep *appsv1.Deployment) (map[string]corev1.EnvVar, *appsv1.Deployment) {
	t.Helper()
	var d appsv1.Deployment
	if err := c.Client.Get(context.Background(), client.ObjectKeyFromObject(dep), &d); err != nil {
		t.Fatal(err)
	}
	out := map[string]corev1.EnvVar{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		out[e.Name] = e
	}
	return out, &d
}

// startPod starts a site runtime the way the injected pod template tells it to (DECO_RELEASE,
// DECO_ALLOWED_AUTHORITIES, the reload token from the Secret) and registers a Pod for it.
func startPod(t *testing.T, c *testenv.Cluster, sh *shared, dep *appsv1.Deployment, df *decov1.Decofile, name string) *siteruntime.Runtime {
	t.Helper()
	env, stored := envOf(t, c, dep)
	var secret corev1.Secret
	testenv.Eventually(t, waitFor, func() error {
		return c.Client.Get(context.Background(), client.ObjectKey{Namespace: df.Namespace, Name: df.ReloadSecretName()}, &secret)
	})
	rt, err := siteruntime.New(context.Background(), siteruntime.Options{
		Release:            env[decov1.EnvRelease].Value,
		AllowedAuthorities: siteruntime.ParseAuthorities(env[decov1.EnvAllowedAuthorities].Value),
		Token:              string(secret.Data[decov1.ReloadTokenKey]),
		HTTPClient:         sh.cdn.Client(),
	})
	if err != nil {
		t.Fatalf("cold start of %s: %v", name, err)
	}
	l := testenv.LoopbackListener(t)
	srv := &http.Server{Handler: rt.Handler()}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := l.Addr().(*net.TCPAddr)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: df.Namespace, Labels: stored.Spec.Template.Labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "site:1",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(addr.Port)}}}}},
	}
	if err := c.Client.Create(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: addr.IP.String(), PodIPs: []corev1.PodIP{{IP: addr.IP.String()}}}
	if err := c.Client.Status().Update(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	return rt
}

var errNotYet = errors.New("not yet")
