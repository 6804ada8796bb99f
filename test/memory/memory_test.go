// Package memory runs the manager as siteops-manager builds it, every part against real servers
// (kube-apiserver and etcd, Valkey with Sentinels, the mirror's Redis, S3, a git remote, the
// audit webhook), and checks that what it keeps for objects goes when they go: the mirror's
// writers, watch streams and their attribution, the Decofile delivery and rollout controllers'
// entries, the tenant part's per-user state.
package memory

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/pprof/profile"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/devenv"
	"github.com/siteops/siteops/internal/manager"
)

func TestMain(m *testing.M) {
	// Fine enough to tell what a round left, and to size client-go's Event cache.
	runtime.MemProfileRate = 4096
	ctrllog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

// The shape of one round: GitTargets (each with its own branch, so its own writer, and a
// WatchRule, so its own watch stream) and inline Decofiles, spread over namespaces.
const (
	gitTargets  = 200
	decofiles   = 500
	namespaces  = 20
	roundLabel  = "memory.siteops.dev/round"
	maxGrowth   = 0.10
	waitTimeout = 3 * time.Minute
)

// TestDeletedObjectsAreLetGo creates and deletes 200 GitTargets and 500 Decofiles, each having
// run (a first commit pushed, Ready), and checks the manager's live heap returns within 10 % of
// where it was. A warm-up round of the same shape first brings caches, informers and pools to
// their steady state; each round uses names of its own, so nothing kept by name is reused.
// What a round leaves for a while is client-go's cache of the Events it recorded (about 1.1 MiB
// for a round's ~1,400 Events, let go 6 to 12 minutes later): the heap it holds, told by the
// heap profile's stacks, is left out of both figures and logged. The push receiver's replay
// window stays in. With MEMORY_TEST_PROFILES set to a folder, heap profiles of both points are
// written there.
func TestDeletedObjectsAreLetGo(t *testing.T) {
	if testing.Short() {
		t.Skip("needs kube-apiserver, Redis, git and S3; skipped in -short mode")
	}
	ctx := context.Background()
	o := manager.DefaultOptions() // every part
	env, err := devenv.Start(ctx, devenv.Options{KubeconfigPath: t.TempDir() + "/kubeconfig", Manager: o, Out: io.Discard})
	if err != nil {
		t.Fatalf("start the manager and its servers: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	s := &suite{env: env, c: env.Client}
	s.setUp(t)

	start := time.Now()
	s.round(t, "warm-up")
	warm := time.Since(start)
	base, baseEvents := liveHeap(t), eventCacheHeap(t)
	writeProfile(t, "base")
	start = time.Now()
	s.round(t, "measured")
	after, afterEvents := liveHeap(t), eventCacheHeap(t)
	writeProfile(t, "after")
	if baseEvents == 0 || afterEvents <= baseEvents {
		t.Fatalf("client-go's Event cache held %.2f MiB after the warm-up round and %.2f MiB after the measured one: the profile does not see it", mib(baseEvents), mib(afterEvents))
	}
	t.Logf("client-go's Event cache %.2f → %.2f MiB (left out below)", mib(baseEvents), mib(afterEvents))
	base, after = base-baseEvents, after-afterEvents
	ratio := float64(after) / float64(base)
	t.Logf("live heap after the warm-up round %.1f MiB, after the measured round %.1f MiB (%.3f×); rounds took %s and %s",
		mib(base), mib(after), ratio, warm.Round(time.Second), time.Since(start).Round(time.Second))
	if ratio > 1+maxGrowth {
		t.Errorf("live heap grew from %.1f MiB to %.1f MiB (+%.1f %%) over a round whose objects are all gone: something is kept for them",
			mib(base), mib(after), (ratio-1)*100)
	}
}

type suite struct {
	env *devenv.Env
	c   client.Client
	// repos are the git repositories of the mirror namespaces, by namespace.
	repos map[string]string
}

func gitNamespace(i int) string  { return fmt.Sprintf("memory-git-%d", i%namespaces) }
func siteNamespace(i int) string { return fmt.Sprintf("memory-sites-%d", i%namespaces) }

// setUp creates what both rounds share: the namespaces (a test API server has no namespace
// controller to delete them), a repository per mirror namespace and the ConfigMap each target
// commits first.
func (s *suite) setUp(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	s.repos = map[string]string{}
	for i := range namespaces {
		for _, ns := range []string{gitNamespace(i), siteNamespace(i)} {
			if err := s.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
				t.Fatal(err)
			}
		}
		url, err := s.env.Servers.Git.CreateRepo(gitNamespace(i), "main")
		if err != nil {
			t.Fatal(err)
		}
		s.repos[gitNamespace(i)] = url
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: gitNamespace(i)}, Data: map[string]string{"color": "blue"}}
		if err := s.c.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
}

// round creates the objects of one round, waits until each ran, deletes them and waits until
// the manager let go of them.
func (s *suite) round(t *testing.T, round string) {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{roundLabel: round}
	var objs []client.Object
	for i := range namespaces {
		objs = append(objs, &mirrorv1alpha1.GitProvider{
			ObjectMeta: metav1.ObjectMeta{Name: round, Namespace: gitNamespace(i), Labels: labels},
			Spec: mirrorv1alpha1.GitProviderSpec{URL: s.repos[gitNamespace(i)], AllowedBranches: []string{round + "/*"},
				Committer: mirrorv1alpha1.Committer{Name: "Mirror Bot", Email: "mirror@example.com"}},
		})
	}
	for i := range gitTargets {
		name := fmt.Sprintf("%s-%d", round, i)
		objs = append(objs,
			&mirrorv1alpha1.GitTarget{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: gitNamespace(i), Labels: labels},
				Spec: mirrorv1alpha1.GitTargetSpec{ProviderRef: corev1.LocalObjectReference{Name: round}, Branch: round + "/" + name,
					Path: "cluster", CommitWindow: &metav1.Duration{}},
			},
			&mirrorv1alpha1.WatchRule{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: gitNamespace(i), Labels: labels},
				Spec: mirrorv1alpha1.WatchRuleSpec{TargetRef: mirrorv1alpha1.TargetReference{Name: name},
					Rules: []mirrorv1alpha1.ResourceRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}}}},
			})
	}
	for i := range decofiles {
		objs = append(objs, &decov1.Decofile{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", round, i), Namespace: siteNamespace(i), Labels: labels},
			Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: &decov1.InlineSource{Value: map[string]apiextensionsv1.JSON{
				"home": {Raw: fmt.Appendf(nil, `{"title":"%s %d","sections":["hero","footer"]}`, round, i)},
			}}},
		})
	}
	began := time.Now()
	phase := func(what string) {
		t.Logf("%s: %s after %s", round, what, time.Since(began).Round(100*time.Millisecond))
	}
	each(t, objs, func(ctx context.Context, o client.Object) error { return s.c.Create(ctx, o) })
	phase("created")

	sel := client.MatchingLabels(labels)
	waitFor(t, round+": every GitTarget pushed its first commit", func() error {
		var list mirrorv1alpha1.GitTargetList
		if err := s.c.List(ctx, &list, sel); err != nil {
			return err
		}
		pushed := 0
		for _, gt := range list.Items {
			if gt.Status.LastPushedCommit != "" {
				pushed++
			}
		}
		if pushed != gitTargets {
			return fmt.Errorf("%d of %d GitTargets pushed", pushed, gitTargets)
		}
		return nil
	})
	phase("every GitTarget pushed")
	waitFor(t, round+": every Decofile Ready", func() error {
		var list decov1.DecofileList
		if err := s.c.List(ctx, &list, sel); err != nil {
			return err
		}
		ready := 0
		for _, df := range list.Items {
			if df.Status.ObservedGeneration == df.Generation && df.Status.ContentStored() {
				ready++
			}
		}
		if ready != decofiles {
			return fmt.Errorf("%d of %d Decofiles Ready", ready, decofiles)
		}
		return nil
	})

	phase("every object ran")
	each(t, objs, func(ctx context.Context, o client.Object) error { return client.IgnoreNotFound(s.c.Delete(ctx, o)) })
	// A test API server has no garbage collector: delete what the Decofiles owned, as it would.
	var owned []client.Object
	for _, o := range objs {
		if df, ok := o.(*decov1.Decofile); ok {
			owned = append(owned,
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: df.ConfigMapName(), Namespace: df.Namespace}},
				&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: df.ReloadSecretName(), Namespace: df.Namespace}})
		}
	}
	each(t, owned, func(ctx context.Context, o client.Object) error { return client.IgnoreNotFound(s.c.Delete(ctx, o)) })

	waitFor(t, round+": every object gone", func() error {
		for _, l := range []client.ObjectList{&decov1.DecofileList{}, &mirrorv1alpha1.GitTargetList{}, &mirrorv1alpha1.WatchRuleList{}, &mirrorv1alpha1.GitProviderList{}} {
			if err := s.c.List(ctx, l, sel); err != nil {
				return err
			}
			if n := meta.LenList(l); n > 0 {
				return fmt.Errorf("%d %T items left", n, l)
			}
		}
		return nil
	})
	phase("deleted")
	// The manager saw them go: the delivery controller dropped each Decofile's size gauges, every
	// writer of the round stopped (its pending-writes gauge goes when its run ends) and none is
	// stopping.
	waitFor(t, round+": the manager let go of every writer and Decofile", func() error {
		fams, err := crmetrics.Registry.Gather()
		if err != nil {
			return err
		}
		var left []string
		for _, f := range fams {
			switch f.GetName() {
			case "siteops_decofile_raw_bytes", "siteops_decofile_stored_bytes":
				if n := countSeries(f, "name", round+"-"); n > 0 {
					left = append(left, fmt.Sprintf("%s: %d Decofiles", f.GetName(), n))
				}
			case "siteops_mirror_pending_writes":
				if n := countSeries(f, "writer", "#"+round+"/"); n > 0 {
					left = append(left, fmt.Sprintf("%d writers running", n))
				}
			case "siteops_mirror_writers_stopping":
				if v := f.GetMetric()[0].GetGauge().GetValue(); v > 0 {
					left = append(left, fmt.Sprintf("%v writers stopping", v))
				}
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("still kept: %s", strings.Join(left, ", "))
		}
		return nil
	})
	phase("let go")
}

// countSeries counts f's series whose label has a value containing part.
func countSeries(f *dto.MetricFamily, label, part string) int {
	n := 0
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == label && strings.Contains(l.GetValue(), part) {
				n++
			}
		}
	}
	return n
}

// each runs fn on every object, 8 at a time.
func each(t *testing.T, objs []client.Object, fn func(context.Context, client.Object) error) {
	t.Helper()
	g, ctx := errgroup.WithContext(context.Background())
	g.SetLimit(8)
	for _, o := range objs {
		g.Go(func() error {
			if err := fn(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("%T %s/%s: %w", o, o.GetNamespace(), o.GetName(), err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls check until it returns nil, failing the test with its last error after
// waitTimeout.
func waitFor(t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s: %v", what, waitTimeout, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// liveHeap is the smallest heap marked live by five forced collections half a second apart:
// what the process keeps, without what work in flight (a resync round, a request) holds for a
// moment.
func liveHeap(t *testing.T) uint64 {
	t.Helper()
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	least := ^uint64(0)
	for i := range 5 {
		if i > 0 {
			time.Sleep(500 * time.Millisecond)
		}
		runtime.GC()
		debug.FreeOSMemory()
		metrics.Read(sample)
		least = min(least, sample[0].Value.Uint64())
	}
	return least
}

// eventRecording is the function of client-go's Event broadcaster that stores each Event it
// records in its cache, where it stays 6 to 12 minutes.
const eventRecording = "k8s.io/client-go/tools/events.(*eventBroadcasterImpl).recordToSink"

// eventCacheHeap is the live heap allocated under eventRecording, as of the last collection,
// from the heap profile (scaled from its samples, as pprof does).
func eventCacheHeap(t *testing.T) uint64 {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("heap").WriteTo(&buf, 0); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatalf("parse the heap profile: %v", err)
	}
	inuse := slices.IndexFunc(p.SampleType, func(st *profile.ValueType) bool { return st.Type == "inuse_space" })
	if inuse < 0 {
		t.Fatal("the heap profile has no inuse_space")
	}
	var n int64
	for _, sample := range p.Sample {
		if underFunction(sample, eventRecording) {
			n += sample.Value[inuse]
		}
	}
	return uint64(n)
}

// underFunction says whether fn, or a closure of it, is on the sample's stack.
func underFunction(s *profile.Sample, fn string) bool {
	for _, loc := range s.Location {
		for _, line := range loc.Line {
			if line.Function != nil && strings.HasPrefix(line.Function.Name, fn) {
				return true
			}
		}
	}
	return false
}

// writeProfile writes a heap profile named name into $MEMORY_TEST_PROFILES, when set, for
// `go tool pprof -base`.
func writeProfile(t *testing.T, name string) {
	dir := os.Getenv("MEMORY_TEST_PROFILES")
	if dir == "" {
		return
	}
	f, err := os.Create(filepath.Join(dir, name+".pprof"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		t.Fatal(err)
	}
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }
