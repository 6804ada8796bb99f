package attribution_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/siteops/siteops/internal/egress"
	"github.com/siteops/siteops/internal/mirror/attribution"
	"github.com/siteops/siteops/internal/mirror/engine"
	"github.com/siteops/siteops/internal/mirror/gitwriter"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// TestEndedStreamsAreLetGo: the resolver holds a watch stream (and through it the stream's
// writer) only while the engine runs it: GitTargets and rules created and removed in a loop
// leave nothing held.
func TestEndedStreamsAreLetGo(t *testing.T) {
	ac := startAuditedCluster(t, "prod")
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	url, err := remote.CreateRepo("streams", "main")
	if err != nil {
		t.Fatal(err)
	}
	r := ac.resolver(t, attribution.Config{Route: "prod", Grace: time.Second})
	eng := engine.New(dynamic.NewForConfigOrDie(ac.c.Config), nil)
	eng.StreamHook, eng.StreamEndHook = r.ConfigureStream, r.EndStream
	local := egress.MustNew(egress.Config{Schemes: []string{"https", "ssh", "http"}, Hosts: []string{"127.0.0.0/8"}})
	eng.WriterHook = func(cfg *gitwriter.Config) { cfg.Egress = local }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = eng.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	spec := func(uid string, namespaces ...string) engine.TargetSpec {
		s := engine.TargetSpec{UID: uid, Path: "cluster", Writer: engine.WriterSpec{URL: url, Branch: "main",
			Committer: gitwriter.Signature{Name: "Mirror Bot", Email: "mirror@example.com"}}}
		for _, ns := range namespaces {
			s.Streams = append(s.Streams, engine.StreamSpec{GVR: configmaps, Namespace: ns})
		}
		return s
	}
	const targets = 20
	for i := range targets {
		key := types.NamespacedName{Namespace: "team", Name: fmt.Sprintf("t%d", i)}
		testenv.Eventually(t, 10*time.Second, func() error { return eng.Apply(key, spec(key.Name, "a", "b")) })
		// A rule removed from a running target ends its stream.
		if err := eng.Apply(key, spec(key.Name, "a")); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.Streams(); got != targets {
		t.Fatalf("%d streams held for %d targets of one stream each", got, targets)
	}
	for i := range targets {
		eng.Remove(types.NamespacedName{Namespace: "team", Name: fmt.Sprintf("t%d", i)})
	}
	if got := r.Streams(); got != 0 {
		t.Fatalf("%d streams still held after every target was removed", got)
	}
}
