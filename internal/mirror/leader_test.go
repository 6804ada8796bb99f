package mirror_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/mirror"
	"github.com/siteops/siteops/internal/mirror/engine"
	"github.com/siteops/siteops/internal/scheme"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/shard"
	"github.com/siteops/siteops/internal/testenv"
)

// electedManager starts a manager that competes for the lease id.
func electedManager(t *testing.T, c *testenv.Cluster, o mirror.Options, id string) (ctrl.Manager, *engine.Engine, func()) {
	t.Helper()
	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{
		Scheme: scheme.New(), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		LeaderElection: true, LeaderElectionID: id, LeaderElectionNamespace: "default", LeaderElectionReleaseOnCancel: true,
		LeaseDuration: ptr(4 * time.Second), RenewDeadline: ptr(3 * time.Second), RetryPeriod: ptr(500 * time.Millisecond),
		Controller: config.Controller{SkipNameValidation: ptr(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := mirror.SetupWithEngine(mgr, localGit(o))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once bool
	stop := func() {
		if !once {
			once = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return mgr, eng, stop
}

func TestOnlyTheLeaderMirrors(t *testing.T) {
	c := testenv.APIServer(t)
	srv := testenv.Redis(t, servers.RedisOptions{})
	f := newFixture(t, c)
	opts := mirror.Options{RedisAddr: srv.Addr, RedisKeyPrefix: "leader"}
	id := testenv.Name(t)
	mgrA, engA, stopA := electedManager(t, c, opts, id)
	select {
	case <-mgrA.Elected():
	case <-time.After(30 * time.Second):
		t.Fatal("first manager not elected")
	}
	_, engB, _ := electedManager(t, c, opts, id)
	f.target(t, "t", "", 100*time.Millisecond, "")
	f.watchRule(t, "cms", "t", cmRule())
	f.create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "one", Namespace: f.ns}})
	f.waitFile(t, f.ns+"/core/configmaps/one.yaml", "one")
	key := types.NamespacedName{Namespace: f.ns, Name: "t"}
	if _, ok := engA.Status(key); !ok {
		t.Fatal("the leader does not run the target")
	}
	if _, ok := engB.Status(key); ok {
		t.Fatal("the standby runs the target too")
	}
	commits := f.commits()

	// The leader goes away; the standby takes over and resumes from the leader's cursor.
	stopA()
	f.create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "two", Namespace: f.ns}})
	f.waitFile(t, f.ns+"/core/configmaps/two.yaml", "two")
	st := waitStatus(t, engB, key, func(st engine.TargetStatus) error {
		if st.Writer.Pending != 0 {
			return fmt.Errorf("pending %d", st.Writer.Pending)
		}
		return nil
	})
	if len(st.Replays) != 0 {
		t.Errorf("the new leader replayed (%v) instead of resuming from the cursor", st.Replays)
	}
	if n := f.commits(); n != commits+1 {
		t.Errorf("%d commits after the takeover, want %d", n, commits+1)
	}
}

// TestShardsMirrorTheirTargetsAndHandOver runs the main instance and shard a at once: each runs
// the writers of its own GitTargets only, and each rule's status is written by its target's
// shard. A target moved from shard a to the main instance is stopped in a and resumed by the
// main instance from the cursors in Redis: a change made while it moves is committed, once.
func TestShardsMirrorTheirTargetsAndHandOver(t *testing.T) {
	c := testenv.APIServer(t)
	srv := testenv.Redis(t, servers.RedisOptions{})
	f := newFixture(t, c)
	ctx := context.Background()
	instance := func(selector string) *engine.Engine {
		sel, err := shard.Parse(selector)
		if err != nil {
			t.Fatal(err)
		}
		eng, _ := runManager(t, c, mirror.Options{RedisAddr: srv.Addr, RedisKeyPrefix: "shards", Shard: sel}, "")
		return eng
	}
	engMain, engA := instance(shard.MainSelector), instance(shard.ForShard("a"))

	f.target(t, "main", "main", 100*time.Millisecond, "")
	moving := &mirrorv1alpha1.GitTarget{
		ObjectMeta: metav1.ObjectMeta{Name: "moving", Namespace: f.ns, Labels: map[string]string{shard.Key: "a"}},
		Spec: mirrorv1alpha1.GitTargetSpec{ProviderRef: ref(f.provider), Branch: "main", Path: "moving",
			CommitWindow: &metav1.Duration{Duration: 100 * time.Millisecond}},
	}
	f.create(t, moving)
	f.watchRule(t, "to-main", "main", cmRule())
	f.watchRule(t, "to-moving", "moving", cmRule())
	f.create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "one", Namespace: f.ns}})
	f.waitFile(t, "main/"+f.ns+"/core/configmaps/one.yaml", "one")
	f.waitFile(t, "moving/"+f.ns+"/core/configmaps/one.yaml", "one")

	mainKey := types.NamespacedName{Namespace: f.ns, Name: "main"}
	movingKey := types.NamespacedName{Namespace: f.ns, Name: "moving"}
	running := func(eng *engine.Engine, key types.NamespacedName) bool { _, ok := eng.Status(key); return ok }
	if !running(engMain, mainKey) || running(engMain, movingKey) || !running(engA, movingKey) || running(engA, mainKey) {
		t.Fatalf("main runs main=%v moving=%v; shard a runs main=%v moving=%v; want each its own",
			running(engMain, mainKey), running(engMain, movingKey), running(engA, mainKey), running(engA, movingKey))
	}
	// Each instance records the commits it pushed for its own targets.
	testenv.Eventually(t, 10*time.Second, func() error {
		if len(engA.Commits().Recent(f.ns, "moving", 0)) == 0 || len(engMain.Commits().Recent(f.ns, "main", 0)) == 0 {
			return fmt.Errorf("shard a records %d commits of moving, the main instance %d of main",
				len(engA.Commits().Recent(f.ns, "moving", 0)), len(engMain.Commits().Recent(f.ns, "main", 0)))
		}
		return nil
	})
	for _, rule := range []string{"to-main", "to-moving"} {
		testenv.Eventually(t, 30*time.Second, func() error {
			var wr mirrorv1alpha1.WatchRule
			if err := c.Client.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: rule}, &wr); err != nil {
				return err
			}
			if len(wr.Status.Conditions) == 0 {
				return fmt.Errorf("rule %s has no status yet", rule)
			}
			return nil
		})
	}

	// Hand "moving" over to the main instance, and change a ConfigMap while it moves.
	var gt mirrorv1alpha1.GitTarget
	if err := c.Client.Get(ctx, movingKey, &gt); err != nil {
		t.Fatal(err)
	}
	delete(gt.Labels, shard.Key)
	if err := c.Client.Update(ctx, &gt); err != nil {
		t.Fatal(err)
	}
	f.create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "two", Namespace: f.ns}})
	f.waitFile(t, "moving/"+f.ns+"/core/configmaps/two.yaml", "two")
	testenv.Eventually(t, 30*time.Second, func() error {
		if running(engA, movingKey) {
			return fmt.Errorf("shard a still runs the target it handed over")
		}
		if !running(engMain, movingKey) {
			return fmt.Errorf("the main instance does not run the target it took over")
		}
		return nil
	})
	f.create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "three", Namespace: f.ns}})
	f.waitFile(t, "moving/"+f.ns+"/core/configmaps/three.yaml", "three")
	if got := f.files(t, "moving/"+f.ns+"/core/configmaps"); len(got) != 3 {
		t.Errorf("the moved target holds %v, want one, two and three", got)
	}
	// Shard a forgot the commits of the target it handed over; the main instance records the
	// target's pushes from then on.
	if got := engA.Commits().Recent(f.ns, "moving", 0); len(got) != 0 {
		t.Errorf("shard a still keeps %d commits of the target it handed over", len(got))
	}
	head := f.git(t, "rev-parse", "main")
	testenv.Eventually(t, 10*time.Second, func() error {
		if got := engMain.Commits().Recent(f.ns, "moving", 1); len(got) != 1 || got[0].Hash != head {
			return fmt.Errorf("the main instance's newest commit of the moved target is %+v, want %s", got, head)
		}
		return nil
	})
}
