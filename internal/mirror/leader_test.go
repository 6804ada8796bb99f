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

	"github.com/siteops/siteops/internal/mirror"
	"github.com/siteops/siteops/internal/mirror/engine"
	"github.com/siteops/siteops/internal/scheme"
	"github.com/siteops/siteops/internal/servers"
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
