// Package soak runs the whole product on a real node for a long time under mixed tenant load
// while faults are injected on a seeded random schedule, and checks at the end that nothing was
// lost: every site at its last pushed content on every pod, the mirror's tree equal to the
// cluster with every change under its author, every tenant user on every Valkey node and no
// tenant ever reading another's keys, the manager's memory and goroutines stable. `make soak`
// runs the hour-long profile; `make test` runs a short one with a fixed seed.
package soak

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"time"
)

// Fault is a kind of failure the soak injects.
type Fault string

// The faults, each injected several times over a long run and at least once in any run.
const (
	// FaultLeaderKill force-deletes the manager pod holding the Lease (no grace: SIGKILL).
	FaultLeaderKill Fault = "leader-kill"
	// FaultFollowerKill force-deletes the manager pod not holding the Lease.
	FaultFollowerKill Fault = "follower-kill"
	// FaultValkeyMasterKill kills the Valkey master with SIGKILL; the Sentinels fail over, and
	// the old master comes back as a replica.
	FaultValkeyMasterKill Fault = "valkey-master-kill"
	// FaultValkeyReplicaRestart stops a Valkey replica and starts it again.
	FaultValkeyReplicaRestart Fault = "valkey-replica-restart"
	// FaultMirrorRedisRestart stops the mirror's Redis and starts it again.
	FaultMirrorRedisRestart Fault = "mirror-redis-restart"
	// FaultGitRefuse makes the git remote answer 503 to everything for a while.
	FaultGitRefuse Fault = "git-refuse"
	// FaultGitSlow makes the git remote answer every request late for a while.
	FaultGitSlow Fault = "git-slow"
	// FaultAPIServerRestart kills kube-apiserver and starts it again (etcd keeps the data).
	FaultAPIServerRestart Fault = "apiserver-restart"
	// FaultKubeletRestart stops the node's kubelet and starts it again; pods keep running.
	FaultKubeletRestart Fault = "kubelet-restart"
	// FaultSitePodHang freezes one of a tenant's site pods for a while: its reload endpoint
	// accepts connections and never answers.
	FaultSitePodHang Fault = "site-pod-hang"
	// FaultS3Down stops the S3 server of the s3 target for a while and starts it again.
	FaultS3Down Fault = "s3-down"
)

// AllFaults lists every fault kind, in the order a short run injects them.
var AllFaults = []Fault{
	FaultLeaderKill, FaultValkeyMasterKill, FaultGitRefuse, FaultMirrorRedisRestart,
	FaultFollowerKill, FaultValkeyReplicaRestart, FaultGitSlow, FaultAPIServerRestart, FaultKubeletRestart,
	FaultSitePodHang, FaultS3Down,
}

// Event is one fault injected at an offset from the start of the run.
type Event struct {
	At    time.Duration `json:"at"`
	Fault Fault         `json:"fault"`
}

// Plan decides the faults of a run of length d from seed: one of every kind first, in a
// seeded order, then kinds drawn at random, every event gap spaced apart from the previous
// one so the system has time to recover and the recovery is measured alone. The same seed and
// duration give the same plan.
func Plan(seed uint64, d, gap time.Duration) ([]Event, error) {
	if gap <= 0 {
		return nil, fmt.Errorf("fault gap %s: must be positive", gap)
	}
	n := int(d / gap)
	if n < len(AllFaults) {
		return nil, fmt.Errorf("a run of %s with faults %s apart holds %d faults; every one of the %d kinds needs one: run longer or set a shorter gap", d, gap, n, len(AllFaults))
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	kinds := slices.Clone(AllFaults)
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	for len(kinds) < n {
		kinds = append(kinds, AllFaults[rng.IntN(len(AllFaults))])
	}
	events := make([]Event, n)
	for i, k := range kinds {
		// Jitter within the first half of each slot keeps the second half for recovery.
		jitter := time.Duration(rng.Int64N(int64(gap / 2)))
		events[i] = Event{At: time.Duration(i)*gap + jitter, Fault: k}
	}
	return events, nil
}
