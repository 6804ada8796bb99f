package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/controller"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/rollout"
	"github.com/siteops/siteops/internal/decofile/source"
	"github.com/siteops/siteops/internal/decofile/source/ghtest"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// The API server serves Flux's source kinds, so the manager watches them (sourceRef).
func TestMain(m *testing.M) {
	testenv.Main(m, servers.APIServerOptions{ExtraCRDPaths: []string{servers.FluxSourceCRDs()}})
}

// Settings of the manager shared by the tests in this package.
const (
	testThreshold    = 64 << 10
	testLimit        = 256 << 10 // ConfigMap budget, lowered so TooLarge needs little data
	fallbackToken    = "operator-token"
	allowedOrg       = "trusted"
	maxContentBytes  = 8 << 20
	maxArchiveBytes  = 2 << 20
	waitFor          = 30 * time.Second
	pollEvery        = 10 * time.Second // the smallest spec.interval the API accepts
	reconcileTimeout = 20 * time.Second
)

type env struct {
	c  *testenv.Cluster
	gh *ghtest.Server
	// pushURL is the push receiver of the package's manager (secret pushSecret).
	pushURL string
	push    *controller.PushTrigger
	// flux is Flux's source-controller, whose storage the manager reads sourceRef artifacts from.
	flux *servers.FluxSource
}

func (e *env) trigger(t *testing.T) *controller.PushTrigger {
	t.Helper()
	return e.push
}

var (
	sharedEnv  *env
	sharedOnce sync.Once
)

// start returns the package's API server with one manager running the delivery controller
// against a shared local GitHub.
func start(t *testing.T) *env {
	t.Helper()
	c := testenv.APIServer(t)
	sharedOnce.Do(func() {
		gh := ghtest.Start()
		// The cache as the siteops-manager has it: Decofiles without their inline content.
		co := cache.Options{DefaultTransform: cache.TransformStripManagedFields()}
		controller.CacheOptions(&co)
		// The manager's reads of single Decofiles are recorded (decofileReads).
		cfg := rest.CopyConfig(c.Config)
		cfg.Wrap(decofileReads.wrap)
		mgr, err := ctrl.NewManager(cfg, ctrl.Options{
			Scheme:     c.Scheme,
			Cache:      co,
			Metrics:    metricsserver.Options{BindAddress: "0"},
			Logger:     managerLogs.logger(),
			Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		})
		if err != nil {
			t.Fatal(err)
		}
		limits := source.Limits{ArchiveBytes: maxArchiveBytes, DecompressedBytes: maxContentBytes}
		fluxDir, err := os.MkdirTemp("", "siteops-flux-source-")
		if err != nil {
			t.Fatal(err)
		}
		flux, err := servers.StartFluxSource(context.Background(), c.KubeConfig, fluxDir)
		if err != nil {
			t.Fatal(err)
		}
		trigger, pushURL := startPush(t, mgr)
		app := installApp(t, gh)
		err = controller.Setup(mgr, controller.Options{
			Push:   trigger,
			GitHub: &source.GitHub{APIURL: gh.APIURL, ArchiveURL: gh.ArchiveURL, Limits: limits, Egress: testEgress, Timeout: sourceTimeout},
			// A retrieval that times out counts as a hang, as it does with the flags' defaults.
			Git:         &source.Git{Limits: limits, Egress: testEgress, Timeout: sourceTimeout, Gate: &source.Gate{HangAfter: sourceTimeout / 2}},
			Tokens:      source.TokenPolicy{Fallback: fallbackToken, AllowedOrgs: []string{allowedOrg, appOrg}, App: app},
			FluxStorage: flux.StorageURL,
			Encode:      encode.Options{Threshold: testThreshold, Limit: testLimit},
			// As in the manager: the rollout of content no pod has to hear about is written with
			// it, so Ready (stored and delivered) needs no rollout controller here.
			Rollout: rollout.Settler{Reader: mgr.GetAPIReader()},
		})
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			if err := mgr.Start(context.Background()); err != nil {
				panic(fmt.Sprintf("manager stopped: %v", err))
			}
		}()
		sharedEnv = &env{c: c, gh: gh, pushURL: pushURL, push: trigger, flux: flux}
	})
	if sharedEnv == nil {
		t.Fatal("manager did not start")
	}
	return sharedEnv
}

func (e *env) get(t *testing.T, ns, name string) *decov1.Decofile {
	t.Helper()
	var df decov1.Decofile
	if err := e.c.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &df); err != nil {
		t.Fatal(err)
	}
	return &df
}

func (e *env) configMap(t *testing.T, ns, name string) *corev1.ConfigMap {
	t.Helper()
	var cm corev1.ConfigMap
	if err := e.c.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "decofile-" + name}, &cm); err != nil {
		t.Fatal(err)
	}
	return &cm
}

// waitReady waits until the Decofile's Ready condition has status and (when set) reason, for
// the current generation, and returns the Decofile.
func (e *env) waitReady(t *testing.T, ns, name string, status metav1.ConditionStatus, reason string, also func(*decov1.Decofile) error) *decov1.Decofile {
	t.Helper()
	var df decov1.Decofile
	testenv.Eventually(t, waitFor, func() error {
		if err := e.c.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &df); err != nil {
			return err
		}
		c := meta.FindStatusCondition(df.Status.Conditions, decov1.ConditionReady)
		if c == nil || df.Status.ObservedGeneration != df.Generation {
			return fmt.Errorf("not reconciled yet: %+v", df.Status)
		}
		if c.Status != status || (reason != "" && c.Reason != reason) {
			return fmt.Errorf("Ready=%s %s: %s", c.Status, c.Reason, c.Message)
		}
		if also != nil {
			return also(&df)
		}
		return nil
	})
	return &df
}

func ready(df *decov1.Decofile) *metav1.Condition {
	return meta.FindStatusCondition(df.Status.Conditions, decov1.ConditionReady)
}

// isReady reports whether the Decofile key is Ready now.
func (e *env) isReady(key client.ObjectKey) bool {
	var df decov1.Decofile
	return e.c.Client.Get(context.Background(), key, &df) == nil && meta.IsStatusConditionTrue(df.Status.Conditions, decov1.ConditionReady)
}

// update applies change to the Decofile, retrying on conflicts.
func (e *env) update(t *testing.T, ns, name string, change func(*decov1.Decofile)) {
	t.Helper()
	testenv.Eventually(t, waitFor, func() error {
		df := e.get(t, ns, name)
		change(df)
		return e.c.Client.Update(context.Background(), df)
	})
}

// poke forces a reconcile by changing an annotation.
func (e *env) poke(t *testing.T, ns, name string) {
	t.Helper()
	e.update(t, ns, name, func(df *decov1.Decofile) {
		if df.Annotations == nil {
			df.Annotations = map[string]string{}
		}
		df.Annotations["test/poke"] = time.Now().Format(time.RFC3339Nano)
	})
}

// hasEvent waits for an event about the Decofile with reason whose note contains text.
func (e *env) hasEvent(t *testing.T, ns, name, typ, reason, text string) {
	t.Helper()
	testenv.Eventually(t, waitFor, func() error {
		var list eventsv1.EventList
		if err := e.c.Client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return err
		}
		var seen []string
		for _, ev := range list.Items {
			if ev.Regarding.Name == name && ev.Type == typ && ev.Reason == reason && strings.Contains(ev.Note, text) {
				return nil
			}
			seen = append(seen, ev.Type+"/"+ev.Reason+": "+ev.Note)
		}
		return fmt.Errorf("no %s event %s containing %q; have %q", typ, reason, text, seen)
	})
}

func inline(values map[string]string) *decov1.InlineSource {
	v := map[string]apiextensionsv1.JSON{}
	for k, raw := range values {
		v[k] = apiextensionsv1.JSON{Raw: json.RawMessage(raw)}
	}
	return &decov1.InlineSource{Value: v}
}

func mergedOf(t *testing.T, values map[string]string) []byte {
	t.Helper()
	blocks := source.Blocks{}
	for k, v := range values {
		blocks[strings.TrimSuffix(k, ".json")] = json.RawMessage(v)
	}
	m, err := encode.Merge(blocks)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (e *env) create(t *testing.T, obj client.Object) {
	t.Helper()
	if err := e.c.Client.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
}
