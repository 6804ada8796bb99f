package attribution

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/types"

	"github.com/siteops/siteops/internal/mirror/gitwriter"
	"github.com/siteops/siteops/internal/mirror/store"
	"github.com/siteops/siteops/internal/mirror/watch"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

func TestOptions(t *testing.T) {
	var o Options
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	o.BindFlags(fs)
	if o.Grace != 3*time.Second || o.FactTTL != 10*time.Minute || o.Route != "default" || o.MaxWaiting != 10000 || len(o.ClientNames) != 1 || o.ClientNames[0] != "kube-apiserver" {
		t.Fatalf("defaults = %+v", o)
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("disabled options rejected: %v", err)
	}
	if err := fs.Parse([]string{"--author-attribution", "--author-attribution-grace=5s", "--author-attribution-ttl=2s", "--author-attribution-route=a:b"}); err != nil {
		t.Fatal(err)
	}
	err := o.Validate()
	for _, want := range []string{"--author-attribution-ttl", "--author-attribution-route", "--audit-client-ca", "--audit-cert-dir"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v; want a complaint about %s", err, want)
		}
	}
	if _, err := Setup(nil, nil, Options{Enabled: true, Grace: time.Second, FactTTL: time.Minute, Route: "r", ClientCAFile: "ca", ClientNames: []string{"kube-apiserver"}, CertDir: "d"}); err == nil || !strings.Contains(err.Error(), "--redis-addr") {
		t.Errorf("Setup without Redis = %v", err)
	}
	r, err := Setup(nil, nil, Options{})
	if err != nil || r.Enabled() {
		t.Fatalf("disabled Setup = %v, %v", r, err)
	}
}

// ConfigureStream wires a watch stream's config the way the engine's StreamHook expects: live
// events go through SubmitEvent, everything else through the same ordering domain.
func TestConfigureStream(t *testing.T) {
	srv := testenv.Redis(t, servers.RedisOptions{})
	st, err := store.NewRedisStore(store.RedisStoreConfig{Addr: srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	idx := st.AttributionIndex(time.Minute)
	ctx := context.Background()
	must(t, idx.RecordFact(ctx, "r", auditEvent("bob", "u1", "3")))
	r := New(Config{Index: idx, Route: "r", Grace: time.Second})
	out := &sink{}
	cfg := watch.Config{GVR: cm, Sink: out}
	r.ConfigureStream(types.NamespacedName{}, "uid", &cfg)
	if cfg.SubmitEvent == nil || cfg.Sink == watch.Sink(out) {
		t.Fatal("stream not routed through the resolver")
	}
	before := testutil.ToFloat64(Resolutions.WithLabelValues("exact_user"))
	must(t, cfg.SubmitEvent(ctx, upsert("a", "3"), "u1", "3", true))
	must(t, cfg.Sink.Enqueue(ctx, gitwriter.Op{Kind: gitwriter.OpMark, Cursor: gitwriter.Cursor{TargetUID: "t", GVR: cm, RV: "4"}}))
	testenv.Eventually(t, 2*time.Second, func() error {
		// The mark may pass the waiting event (without a cursor); the cursor then rides on it.
		if got := describe(out.snapshot()); got != "mark@(committer) a@4(bob)" && got != "a@3(bob) mark@4(committer)" {
			return errorf("handed over %q", got)
		}
		return nil
	})
	if d := testutil.ToFloat64(Resolutions.WithLabelValues("exact_user")) - before; d != 1 {
		t.Fatalf("exact_user resolutions +%v", d)
	}
	// Disabled: the config is left alone.
	cfg2 := watch.Config{Sink: out}
	New(Config{}).ConfigureStream(types.NamespacedName{}, "uid", &cfg2)
	if cfg2.SubmitEvent != nil || cfg2.Sink != watch.Sink(out) {
		t.Fatal("disabled resolver changed the stream config")
	}
}

// The stored-facts gauge follows the facts in Redis (SCAN of the audit family only).
func TestFactGauge(t *testing.T) {
	srv := testenv.Redis(t, servers.RedisOptions{})
	st, err := store.NewRedisStore(store.RedisStoreConfig{Addr: srv.Addr, KeyPrefix: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	idx := st.AttributionIndex(time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	must(t, st.CommandAuthorStore().RecordCommandAuthor(ctx, "c1", store.CommandAuthor{Author: "x"}))
	go func() { _ = FactGauge{Counter: idx, Interval: 20 * time.Millisecond}.Start(ctx) }()
	for i, want := range []float64{2, 4} {
		must(t, idx.RecordFact(ctx, "r", auditEvent("bob", fmt.Sprint("u", i), "3")))
		testenv.Eventually(t, 2*time.Second, func() error {
			if got := testutil.ToFloat64(StoredFacts); got != want {
				return errorf("gauge %v, want %v", got, want)
			}
			return nil
		})
	}
}
