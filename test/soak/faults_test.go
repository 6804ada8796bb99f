package soak

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/siteops/siteops/internal/servers"
)

// recoveryTimeout bounds each recovery; one that takes longer is reported as not recovered.
const recoveryTimeout = 3 * time.Minute

// inject causes fault f, ends it where it has an end, and measures the recoveries it is judged
// by, from the moment the fault ended.
func (s *soak) inject(t *testing.T, f Fault) FaultResult {
	res := FaultResult{Fault: f, At: time.Since(s.start), Recovery: map[string]time.Duration{}}
	var err error
	switch f {
	case FaultLeaderKill, FaultFollowerKill:
		err = s.killManager(t, f == FaultLeaderKill, res.Recovery)
	case FaultValkeyMasterKill:
		err = s.killValkeyMaster(t)
	case FaultValkeyReplicaRestart:
		err = s.restartValkeyReplica(t)
	case FaultMirrorRedisRestart:
		err = s.restartMirrorRedis(t)
	case FaultAPIServerRestart:
		ctx, cancel := context.WithTimeout(context.Background(), recoveryTimeout)
		err = s.C.KillAndRestart(ctx)
		cancel()
	case FaultKubeletRestart:
		ctx, cancel := context.WithTimeout(context.Background(), recoveryTimeout)
		err = s.N.RestartKubelet(ctx)
		cancel()
	case FaultSitePodHang:
		err = s.hangSitePod(t, res.Recovery)
	case FaultS3Down:
		err = s.stopS3(t, res.Recovery)
	case FaultGitRefuse, FaultGitSlow:
		fault := &servers.GitFault{Refuse: f == FaultGitRefuse}
		if !fault.Refuse {
			fault.Delay = 2 * time.Second
		}
		s.Git.SetFault(fault)
		time.Sleep(*flagOutage)
		s.Git.SetFault(nil)
	default:
		err = fmt.Errorf("no injector for %s", f)
	}
	if err != nil {
		res.Error = err.Error()
		return res
	}
	ended := time.Now()
	measure := func(name string, check func(ctx context.Context) error) {
		if err := s.retry(recoveryTimeout, check); err != nil {
			res.Error = strings.TrimPrefix(res.Error+"; ", "; ") + name + ": " + err.Error()
			return
		}
		res.Recovery[name] = time.Since(ended)
	}
	switch f {
	case FaultValkeyMasterKill, FaultValkeyReplicaRestart:
		measure("all users on all nodes", s.usersOnAllNodes)
		// The next Valkey fault needs a replica to fail over to: the restarted node has been
		// made one, and it is in sync.
		measure("replication restored", s.replicationRestored)
	case FaultMirrorRedisRestart:
		measure("cursors durable", s.cursorsDurable)
	}
	// Every fault is also judged by the next rollout and the next mirror commit after it.
	idx, tn := s.canaryPush(t, s.tenants[s.intN(len(s.tenants))])
	res.Canary = tn.name
	if idx >= 0 {
		measure("next rollout", func(ctx context.Context) error { return s.rolledOutSince(ctx, tn, idx) })
	}
	if took := s.mirrorCanary(t, recoveryTimeout); took >= 0 {
		res.Recovery["next mirror commit"] = time.Since(ended)
	}
	return res
}

// killManager force-deletes the leader's pod (or the other replica's) with no grace, as a
// kill -9 would; for the leader, it measures the handover.
func (s *soak) killManager(t *testing.T, leader bool, rec map[string]time.Duration) error {
	ctx := context.Background()
	holder := s.LeaseHolder(ctx)
	victim := ""
	for _, p := range s.ManagerPods(t) {
		if (p.Name == holder) == leader {
			victim = p.Name
		}
	}
	if victim == "" {
		return fmt.Errorf("no manager pod to kill (leader %q)", holder)
	}
	start := time.Now()
	if err := s.C.Client.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: s.Release, Name: victim}},
		client.GracePeriodSeconds(0)); err != nil {
		return fmt.Errorf("delete manager pod %s: %w", victim, err)
	}
	if leader {
		if err := s.retry(recoveryTimeout, func(ctx context.Context) error {
			if h := s.LeaseHolder(ctx); h == "" || h == victim {
				return fmt.Errorf("Lease held by %q", h)
			}
			return nil
		}); err != nil {
			return err
		}
		rec["lease taken over"] = time.Since(start)
	}
	return nil
}

// readyPodWait bounds the wait for a Ready site pod to freeze.
const readyPodWait = time.Minute

// hangSitePod freezes a site pod of one tenant for the outage time: another tenant's rollout
// must complete while the pod hangs, the hanging tenant's once the pod runs again.
func (s *soak) hangSitePod(t *testing.T, rec map[string]time.Duration) error {
	hung := s.tenants[s.intN(len(s.tenants))]
	return s.outage(t, rec, outage{
		hit: hung, other: s.otherTenant(func(tn *tenant) bool { return tn != hung }),
		during: "other tenant's rollout while a pod hangs", after: "hanging tenant's rollout after the thaw",
		begin: func(context.Context) (func() error, error) {
			// The tenant's pods may be restarting (a rollback, a kubelet restart just before):
			// the fault waits for one to be Ready rather than being lost.
			var pods []corev1.Pod
			err := s.retry(readyPodWait, func(ctx context.Context) error {
				var err error
				if pods, err = s.ReadyPodsNow(ctx, hung.ns, "site"); err == nil && len(pods) == 0 {
					err = errors.New("no Ready site pod")
				}
				return err
			})
			if err != nil {
				return nil, fmt.Errorf("a Ready site pod of %s to freeze within %s: %w", hung.name, readyPodWait, err)
			}
			return s.N.FreezePod(pods[0].UID)
		},
	})
}

// stopS3 stops the S3 server for the outage time: a configmap tenant's rollout must complete
// meanwhile, an s3 tenant's once the server is back.
func (s *soak) stopS3(t *testing.T, rec map[string]time.Duration) error {
	hit := s.otherTenant(func(tn *tenant) bool { return tn.s3 })
	if hit == nil {
		return errors.New("no s3 tenant: the run needs at least four tenants")
	}
	return s.outage(t, rec, outage{
		hit: hit, other: s.otherTenant(func(tn *tenant) bool { return !tn.s3 }),
		during: "other tenant's rollout while S3 is down", after: "s3 tenant's rollout after S3 is back",
		begin: func(context.Context) (func() error, error) {
			if err := s.S3.Stop(); err != nil {
				return nil, fmt.Errorf("stop the S3 server: %w", err)
			}
			return func() error { return s.S3.Restart(context.Background()) }, nil
		},
	})
}

// outage is a fault that hits one tenant and must leave the others alone.
type outage struct {
	hit, other *tenant
	// during and after name the recoveries measured: the other tenant's rollout from its push
	// during the outage, the hit tenant's from the outage's end.
	during, after string
	// begin starts the outage and returns what ends it.
	begin func(context.Context) (end func() error, err error)
}

// outage runs o for the outage time and pushes to both tenants while it lasts.
func (s *soak) outage(t *testing.T, rec map[string]time.Duration, o outage) error {
	end, err := o.begin(context.Background())
	if err != nil {
		return err
	}
	began := time.Now()
	hitIdx, _ := s.canaryPush(t, o.hit)
	var otherErr error
	if o.other != nil {
		otherIdx, _ := s.canaryPush(t, o.other)
		pushed := time.Now()
		otherErr = s.retry(recoveryTimeout, func(ctx context.Context) error { return s.rolledOutSince(ctx, o.other, otherIdx) })
		if otherErr == nil {
			rec[o.during] = time.Since(pushed)
		}
	}
	time.Sleep(time.Until(began.Add(*flagOutage)))
	if err := end(); err != nil {
		return err
	}
	ended := time.Now()
	if otherErr != nil {
		return fmt.Errorf("%s's rollout while %s was hit: %w", o.other.name, o.hit.name, otherErr)
	}
	if hitIdx >= 0 {
		if err := s.retry(recoveryTimeout, func(ctx context.Context) error { return s.rolledOutSince(ctx, o.hit, hitIdx) }); err != nil {
			return fmt.Errorf("%s's rollout once the fault ended: %w", o.hit.name, err)
		}
		rec[o.after] = time.Since(ended)
	}
	return nil
}

// otherTenant is a random tenant for which ok holds, or nil when there is none.
func (s *soak) otherTenant(ok func(*tenant) bool) *tenant {
	var fit []*tenant
	for _, tn := range s.tenants {
		if ok(tn) {
			fit = append(fit, tn)
		}
	}
	if len(fit) == 0 {
		return nil
	}
	return fit[s.intN(len(fit))]
}

// killValkeyMaster kills the current Valkey master; once the Sentinels promoted the replica,
// the old master starts again on its address and the Sentinels make it a replica.
func (s *soak) killValkeyMaster(t *testing.T) error {
	i, err := s.valkeyRole(redisMaster)
	if err != nil {
		return err
	}
	old := s.valkeyNodes[i]
	if err := old.Kill(); err != nil {
		return fmt.Errorf("kill the Valkey master %s: %w", old.Addr, err)
	}
	if err := s.retry(recoveryTimeout, func(ctx context.Context) error {
		addr, err := s.sentinelMaster(ctx)
		if err != nil {
			return err
		}
		if addr == old.Addr {
			return fmt.Errorf("the Sentinels still name %s", addr)
		}
		return nil
	}); err != nil {
		// The node comes back either way: a failover that did not happen must not leave the set
		// without a master for every later fault.
		replicas := s.sentinelReplicas()
		if serr := s.startValkeyNode(t, i); serr != nil {
			err = errors.Join(err, serr)
		}
		return fmt.Errorf("failover: %w (the Sentinels' replicas: %s)", err, replicas)
	}
	return s.startValkeyNode(t, i)
}

// sentinelReplicas is what the first Sentinel that answers says of the master's replicas: their
// address, flags and link to the master, the facts a failover chooses by.
func (s *soak) sentinelReplicas() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, addr := range s.ValkeySet.SentinelAddrs() {
		c := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1})
		replicas, err := c.Replicas(ctx, s.ValkeySet.MasterName).Result()
		_ = c.Close()
		if err != nil {
			continue
		}
		var out []string
		for _, r := range replicas {
			out = append(out, fmt.Sprintf("%s:%s flags=%s link=%s down-since=%sms", r["ip"], r["port"], r["flags"], r["master-link-status"], r["master-link-down-time"]))
		}
		return strings.Join(out, "; ")
	}
	return "no Sentinel answered"
}

// restartValkeyReplica stops the current replica and starts it again.
func (s *soak) restartValkeyReplica(t *testing.T) error {
	i, err := s.valkeyRole(redisReplica)
	if err != nil {
		return err
	}
	if err := s.valkeyNodes[i].Stop(); err != nil {
		return fmt.Errorf("stop the Valkey replica %s: %w", s.valkeyNodes[i].Addr, err)
	}
	return s.startValkeyNode(t, i)
}

// startValkeyNode starts Valkey node i again on its address and with its data; the Sentinels
// point it at the current master.
func (s *soak) startValkeyNode(t *testing.T, i int) error {
	old := s.valkeyNodes[i]
	p, err := servers.StartRedis(context.Background(), servers.RedisOptions{Dir: s.serverDir(t), Host: old.Host(), Port: old.Port(), Password: s.ValkeyPassword})
	if err != nil {
		return fmt.Errorf("start Valkey %s again: %w", old.Addr, err)
	}
	s.restarted = append(s.restarted, p)
	s.valkeyNodes[i] = p
	return nil
}

// restartMirrorRedis stops the mirror's Redis for the outage time and starts it again on its
// address, empty.
func (s *soak) restartMirrorRedis(t *testing.T) error {
	old := s.Redis
	if err := old.Stop(); err != nil {
		return fmt.Errorf("stop the mirror's Redis: %w", err)
	}
	time.Sleep(*flagOutage)
	p, err := servers.StartRedis(context.Background(), servers.RedisOptions{Dir: s.serverDir(t), Host: old.Host(), Port: old.Port(), Password: s.RedisPassword})
	if err != nil {
		return fmt.Errorf("start the mirror's Redis again: %w", err)
	}
	s.restarted = append(s.restarted, p)
	s.Redis = p
	return nil
}

// The replication roles ROLE answers.
const (
	redisMaster  = "master"
	redisReplica = "slave"
)

// valkeyRole is the index of the Valkey node now in role.
func (s *soak) valkeyRole(role string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i, p := range s.valkeyNodes {
		c := redis.NewClient(&redis.Options{Addr: p.Addr, Password: s.ValkeyPassword, MaxRetries: -1})
		r, err := c.Do(ctx, "ROLE").Slice()
		_ = c.Close()
		if err == nil && len(r) > 0 && r[0] == role {
			return i, nil
		}
	}
	return -1, fmt.Errorf("no Valkey node is %s now", role)
}

// replicationRestored reports nil when the node the Sentinels name is the one master and every
// other Valkey node replicates from it with its link up.
func (s *soak) replicationRestored(ctx context.Context) error {
	master, err := s.sentinelMaster(ctx)
	if err != nil {
		return err
	}
	for _, p := range s.valkeyNodes {
		c := redis.NewClient(&redis.Options{Addr: p.Addr, Password: s.ValkeyPassword, MaxRetries: -1})
		r, err := c.Do(ctx, "ROLE").Slice()
		_ = c.Close()
		switch {
		case err != nil:
			return fmt.Errorf("ROLE on %s: %w", p.Addr, err)
		case len(r) == 0:
			return fmt.Errorf("ROLE on %s: empty answer", p.Addr)
		case p.Addr == master:
			if r[0] != redisMaster {
				return fmt.Errorf("%s, the Sentinels' master, is %v", p.Addr, r[0])
			}
		case r[0] != redisReplica || len(r) < 4:
			return fmt.Errorf("%s is %v, not yet a replica of %s", p.Addr, r[0], master)
		case fmt.Sprint(r[1])+":"+fmt.Sprint(r[2]) != master || r[3] != "connected":
			return fmt.Errorf("%s replicates from %v:%v (%v), want %s connected", p.Addr, r[1], r[2], r[3], master)
		}
	}
	return nil
}

// sentinelMaster is the master address the first Sentinel that answers names.
func (s *soak) sentinelMaster(ctx context.Context) (string, error) {
	var errs []error
	for _, addr := range s.ValkeySet.SentinelAddrs() {
		c := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1})
		hp, err := c.GetMasterAddrByName(ctx, s.ValkeySet.MasterName).Result()
		_ = c.Close()
		if err == nil && len(hp) == 2 {
			return hp[0] + ":" + hp[1], nil
		}
		errs = append(errs, err)
	}
	return "", errors.Join(errs...)
}

// usersOnAllNodes reports nil when every tenant's user exists on every Valkey node.
func (s *soak) usersOnAllNodes(ctx context.Context) error {
	for _, p := range s.valkeyNodes {
		c := redis.NewClient(&redis.Options{Addr: p.Addr, Password: s.ValkeyPassword, MaxRetries: -1})
		for _, tn := range s.tenants {
			if err := c.Do(ctx, "ACL", "GETUSER", tn.user).Err(); err != nil {
				_ = c.Close()
				return fmt.Errorf("user %s on %s: %w", tn.user, p.Addr, err)
			}
		}
		_ = c.Close()
	}
	return nil
}

// canaryPush pushes a new edition of tenant tn, retrying while the remote still refuses; it
// returns the push's index and the tenant.
func (s *soak) canaryPush(t *testing.T, tn *tenant) (int, *tenant) {
	idx := -1
	err := s.retry(recoveryTimeout, func(context.Context) error {
		var err error
		idx, err = tn.push()
		return err
	})
	if err != nil {
		t.Errorf("canary push to %s: %v", tn.name, err)
	}
	return idx, tn
}

// rolledOutSince reports nil once the tenant's Decofile is Ready at push idx or a later one,
// with every pod notified.
func (s *soak) rolledOutSince(ctx context.Context, tn *tenant, idx int) error {
	sha, err := s.decofileCommit(ctx, tn, true)
	if err != nil {
		return err
	}
	if at := tn.pushedIndex(sha); at < idx {
		return fmt.Errorf("%s is at push %d (%.7s), want %d or later", tn.name, at, sha, idx)
	}
	return nil
}

// serverDir is a new folder for a server started again, removed after the server stopped.
func (s *soak) serverDir(t *testing.T) string {
	dir, err := os.MkdirTemp(s.dataDir, "server-")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
