package mirror_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/mirror"
	"github.com/siteops/siteops/internal/mirror/engine"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

func cursorKey(prefix string, gt *mirrorv1alpha1.GitTarget) string {
	return prefix + ":watch:v1:target:" + string(gt.UID) + ":/configmaps:namespace:" + gt.Namespace + ":last-rv"
}

func waitStatus(t testing.TB, eng *engine.Engine, key types.NamespacedName, check func(engine.TargetStatus) error) engine.TargetStatus {
	t.Helper()
	var st engine.TargetStatus
	testenv.Eventually(t, 30*time.Second, func() error {
		var ok bool
		st, ok = eng.Status(key)
		if !ok {
			return fmt.Errorf("target %s not running", key)
		}
		return check(st)
	})
	return st
}

func TestCursorResumeAndExpiredReplay(t *testing.T) {
	c := testenv.APIServer(t)
	srv := testenv.Redis(t, servers.RedisOptions{})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	f := newFixture(t, c)
	ctx := context.Background()
	opts := mirror.Options{RedisAddr: srv.Addr, RedisKeyPrefix: "resume"}
	key := types.NamespacedName{Namespace: f.ns, Name: "t"}

	eng, stop := runManager(t, c, opts, "")
	gt := f.target(t, "t", "m", 100*time.Millisecond, "")
	f.watchRule(t, "cms", "t", cmRule())
	cms := map[string]*corev1.ConfigMap{}
	for _, n := range []string{"a", "b", "c"} {
		cms[n] = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: n, Namespace: f.ns}, Data: map[string]string{"v": "1"}}
		f.create(t, cms[n])
	}
	for n := range cms {
		f.waitFile(t, "m/"+f.ns+"/core/configmaps/"+n+".yaml", "v: \"1\"")
	}
	// The first start had no cursor: one replay.
	waitStatus(t, eng, key, func(st engine.TargetStatus) error {
		if st.Replays["no-cursor"] != 1 {
			return fmt.Errorf("replays %v", st.Replays)
		}
		return nil
	})
	// The cursor reaches the last event only after its push.
	lastRV, _ := strconv.Atoi(cms["c"].ResourceVersion)
	testenv.Eventually(t, 15*time.Second, func() error {
		v, err := rdb.Get(ctx, cursorKey("resume", gt)).Result()
		if err != nil {
			return err
		}
		if n, _ := strconv.Atoi(v); n < lastRV {
			return fmt.Errorf("cursor %s < %d", v, lastRV)
		}
		return nil
	})
	stop()

	// While the mirror is down: a changes.
	patch(t, c, cms["a"], func() { cms["a"].Data["v"] = "2" })
	commits := f.commits()
	eng, stop = runManager(t, c, opts, "")
	f.waitFile(t, "m/"+f.ns+"/core/configmaps/a.yaml", "v: \"2\"")
	st := waitStatus(t, eng, key, func(st engine.TargetStatus) error {
		if st.Writer.Pending != 0 || st.Writer.LastPushedCommit == "" {
			return fmt.Errorf("writer %+v", st.Writer)
		}
		return nil
	})
	if len(st.Replays) != 0 {
		t.Fatalf("restart with a cursor replayed: %v", st.Replays)
	}
	if n := f.commits(); n != commits+1 {
		t.Fatalf("%d commits after the restart, want %d (no duplicates)", n, commits+1)
	}
	if msg := f.git(t, "log", "-1", "--format=%s", "main"); msg != "[UPDATE] v1/configmaps/"+f.ns+"/a" {
		t.Fatalf("commit after restart = %q", msg)
	}
	stop()

	// While the mirror is down: b is deleted and the cursor expires. The restart replays and
	// the sweep removes b's file.
	if err := c.Client.Delete(ctx, cms["b"]); err != nil {
		t.Fatal(err)
	}
	keys, err := rdb.Keys(ctx, "resume:*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("cursor keys %v: %v", keys, err)
	}
	for _, k := range keys {
		if err := rdb.PExpire(ctx, k, time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if n, _ := rdb.Exists(ctx, keys...).Result(); n != 0 {
			return fmt.Errorf("%d keys left", n)
		}
		return nil
	})
	eng, _ = runManager(t, c, opts, "")
	f.waitNoFile(t, "m/"+f.ns+"/core/configmaps/b.yaml")
	waitStatus(t, eng, key, func(st engine.TargetStatus) error {
		if st.Replays["no-cursor"] != 1 {
			return fmt.Errorf("replays %v", st.Replays)
		}
		return nil
	})
	if f.file("m/"+f.ns+"/core/configmaps/a.yaml") == "" || f.file("m/"+f.ns+"/core/configmaps/c.yaml") == "" {
		t.Fatal("the sweep removed files of existing objects")
	}
	if msg := f.git(t, "log", "-1", "--format=%s", "main"); msg != "[DELETE] v1/configmaps/"+f.ns+"/b" {
		t.Fatalf("sweep commit = %q", msg)
	}
}

// TestRedisDownKeepsCommitting: with the mirror's Redis down, commits go on, the GitTargets say
// their cursors are not durable, and the replica stays ready.
func TestRedisDownKeepsCommitting(t *testing.T) {
	c := testenv.APIServer(t)
	srv := testenv.Redis(t, servers.RedisOptions{})
	f := newFixture(t, c)
	probe := testenv.FreeLoopbackAddr(t)
	runManager(t, c, mirror.Options{RedisAddr: srv.Addr, RedisKeyPrefix: "down"}, probe)
	f.target(t, "t", "", 100*time.Millisecond, "")
	f.watchRule(t, "cms", "t", cmRule())
	f.create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before", Namespace: f.ns}})
	f.waitFile(t, f.ns+"/core/configmaps/before.yaml", "before")
	f.waitCondition(t, "t", mirrorv1alpha1.ConditionCursorsDurable, metav1.ConditionTrue, "Recorded")
	waitReadyz(t, probe, http.StatusOK)

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	f.create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after", Namespace: f.ns}})
	f.waitFile(t, f.ns+"/core/configmaps/after.yaml", "after")
	gt := f.waitCondition(t, "t", mirrorv1alpha1.ConditionCursorsDurable, metav1.ConditionFalse, "RedisUnavailable")
	if r := findCond(gt, mirrorv1alpha1.ConditionReady); r == nil || r.Status != metav1.ConditionTrue {
		t.Errorf("Ready while Redis is down = %+v; commits continue, so it stays true", r)
	}
	// The mirror's Redis is no part of readiness: the manager's webhooks must stay reachable.
	resp, err := http.Get("http://" + probe + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz = %d while the mirror's Redis is down, want 200", resp.StatusCode)
	}
}

func findCond(gt *mirrorv1alpha1.GitTarget, typ string) *metav1.Condition {
	for i := range gt.Status.Conditions {
		if gt.Status.Conditions[i].Type == typ {
			return &gt.Status.Conditions[i]
		}
	}
	return nil
}

func waitReadyz(t testing.TB, addr string, code int) {
	t.Helper()
	testenv.Eventually(t, 20*time.Second, func() error {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != code {
			return fmt.Errorf("/readyz = %d, want %d", resp.StatusCode, code)
		}
		return nil
	})
}

func TestSpecChangeReplaysIntoTheNewPath(t *testing.T) {
	c := testenv.APIServer(t)
	srv := testenv.Redis(t, servers.RedisOptions{})
	f := newFixture(t, c)
	opts := mirror.Options{RedisAddr: srv.Addr, RedisKeyPrefix: "spec"}
	_, stop := runManager(t, c, opts, "")
	gt := f.target(t, "t", "a", 100*time.Millisecond, "")
	f.watchRule(t, "cms", "t", cmRule())
	f.create(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: f.ns}})
	f.waitFile(t, "a/"+f.ns+"/core/configmaps/x.yaml", "x")
	f.waitCondition(t, "t", mirrorv1alpha1.ConditionCursorsDurable, metav1.ConditionTrue, "Recorded")

	// Changed while running: the new path gets every object without waiting for a change.
	patch(t, c, gt, func() { gt.Spec.Path = "b" })
	f.waitFile(t, "b/"+f.ns+"/core/configmaps/x.yaml", "x")
	testenv.Eventually(t, 10*time.Second, func() error {
		if err := c.Client.Get(context.Background(), types.NamespacedName{Namespace: f.ns, Name: "t"}, gt); err != nil {
			return err
		}
		if gt.Status.ObservedGeneration != gt.Generation {
			return fmt.Errorf("observedGeneration %d, generation %d", gt.Status.ObservedGeneration, gt.Generation)
		}
		return nil
	})
	stop()

	// Changed while the mirror was down: the cursors of path b must not skip path c.
	patch(t, c, gt, func() { gt.Spec.Path = "c" })
	runManager(t, c, opts, "")
	f.waitFile(t, "c/"+f.ns+"/core/configmaps/x.yaml", "x")
}
