package mirror_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	mirrorv1alpha1 "github.com/siteops/siteops/api/mirror/v1alpha1"
	"github.com/siteops/siteops/internal/mirror"
	"github.com/siteops/siteops/internal/mirror/controller"
	"github.com/siteops/siteops/internal/mirror/engine"
	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// TestSuspendCommitsNothingAndKeepsCursors: a suspended GitTarget, and a suspended WatchRule,
// commit nothing of what changes meanwhile; the resume commits it from the kept cursors, with no
// replay.
func TestSuspendCommitsNothingAndKeepsCursors(t *testing.T) {
	c := testenv.APIServer(t)
	srv := testenv.Redis(t, servers.RedisOptions{})
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	f := newFixture(t, c)
	ctx := context.Background()
	key := types.NamespacedName{Namespace: f.ns, Name: "t"}
	eng, _ := runManager(t, c, mirror.Options{RedisAddr: srv.Addr, RedisKeyPrefix: "suspend"}, "")
	gt := f.target(t, "t", "m", 100*time.Millisecond, "")
	f.watchRule(t, "cms", "t", cmRule())
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: f.ns}, Data: map[string]string{"v": "1"}}
	f.create(t, cm)
	path := "m/" + f.ns + "/core/configmaps/a.yaml"
	f.waitFile(t, path, `v: "1"`)
	pushed := func(st engine.TargetStatus) error {
		if st.Writer.Pending != 0 || st.Writer.LastPushedCommit == "" {
			return fmt.Errorf("writer %+v", st.Writer)
		}
		return nil
	}
	waitStatus(t, eng, key, pushed)
	waitCursor(t, rdb, gt, cm)

	if err := c.Client.Get(ctx, key, gt); err != nil {
		t.Fatal(err)
	}
	patch(t, c, gt, func() { gt.Spec.Suspend = true })
	suspended := f.waitCondition(t, "t", mirrorv1alpha1.ConditionReady, metav1.ConditionFalse, controller.ReasonSuspended)
	if _, running := eng.Status(key); running {
		t.Fatal("the suspended GitTarget still runs in the mirror")
	}
	for _, h := range suspended.Status.History {
		if h.Result == controller.ReasonSuspended {
			t.Errorf("suspension recorded as a push failure in status.history: %+v", h)
		}
	}
	commits := f.commits()
	patch(t, c, cm, func() { cm.Data["v"] = "2" })
	// Ten commit windows: a running target would have pushed by now.
	time.Sleep(time.Second)
	if n := f.commits(); n != commits {
		t.Fatalf("%d commits while suspended, want none", n-commits)
	}
	if got := f.file(path); got == "" || !strings.Contains(got, `v: "1"`) {
		t.Fatalf("file changed while suspended: %q", got)
	}

	patch(t, c, gt, func() { gt.Spec.Suspend = false })
	f.waitFile(t, path, `v: "2"`)
	st := waitStatus(t, eng, key, pushed)
	if len(st.Replays) != 0 {
		t.Fatalf("the resume replayed instead of resuming from the cursors: %v", st.Replays)
	}
	if n := f.commits(); n != commits+1 {
		t.Fatalf("%d commits after the resume, want 1", n-commits)
	}
	waitCursor(t, rdb, gt, cm)

	// A suspended WatchRule: its watch stops, its file stays, its target reports no stream.
	rule := &mirrorv1alpha1.WatchRule{}
	if err := c.Client.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: "cms"}, rule); err != nil {
		t.Fatal(err)
	}
	patch(t, c, rule, func() { rule.Spec.Suspend = true })
	waitStatus(t, eng, key, func(st engine.TargetStatus) error {
		if st.Streams != 0 {
			return fmt.Errorf("%d streams run for the suspended rule", st.Streams)
		}
		return nil
	})
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := c.Client.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: "cms"}, rule); err != nil {
			return err
		}
		if r := meta.FindStatusCondition(rule.Status.Conditions, mirrorv1alpha1.ConditionReady); r == nil || r.Reason != controller.ReasonSuspended {
			return fmt.Errorf("WatchRule Ready %+v, want reason %s", r, controller.ReasonSuspended)
		}
		return nil
	})
	commits = f.commits()
	patch(t, c, cm, func() { cm.Data["v"] = "3" })
	time.Sleep(time.Second)
	if n := f.commits(); n != commits {
		t.Fatalf("%d commits while the rule was suspended, want none", n-commits)
	}
	if f.file(path) == "" {
		t.Fatal("suspending the rule removed its file")
	}
	patch(t, c, rule, func() { rule.Spec.Suspend = false })
	f.waitFile(t, path, `v: "3"`)
	st = waitStatus(t, eng, key, pushed)
	if len(st.Replays) != 0 {
		t.Fatalf("the rule's resume replayed instead of resuming from its cursor: %v", st.Replays)
	}
}

// waitCursor waits until the cursor of gt's ConfigMap watch in Redis has reached cm's last
// change: only then does a stop keep everything up to it.
func waitCursor(t *testing.T, rdb *redis.Client, gt *mirrorv1alpha1.GitTarget, cm *corev1.ConfigMap) {
	t.Helper()
	want, _ := strconv.Atoi(cm.ResourceVersion)
	testenv.Eventually(t, 15*time.Second, func() error {
		v, err := rdb.Get(context.Background(), cursorKey("suspend", gt)).Result()
		if err != nil {
			return err
		}
		if n, _ := strconv.Atoi(v); n < want {
			return fmt.Errorf("cursor %s < %d", v, want)
		}
		return nil
	})
}
