package push

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// LabelReplay marks the Leases of the replay cache; its value is the kind of key the Lease
// remembers: "body" (the digest of a signed body) or "id" (a delivery ID).
const LabelReplay = "siteops.dev/push-replay"

// Defaults of the shared replay cache.
const (
	// DefaultMaxReplayLeases bounds the Leases the replay cache keeps; past it the sweep removes
	// the oldest.
	DefaultMaxReplayLeases = 10_000
	// DefaultReplaySweepInterval is how often the sweep removes expired Leases.
	DefaultReplaySweepInterval = time.Minute

	leasePrefix = "push-replay-"
	// replayTimeout bounds the API requests of one delivery's check.
	replayTimeout = 10 * time.Second
	listPage      = 500
)

// Operations of siteops_decofile_push_replay_cache_errors_total.
const (
	opCheck   = "check"
	opRelease = "release"
	opSweep   = "sweep"
)

// replayKey is one thing a delivery is remembered by.
type replayKey struct {
	kind string // "body" or "id"
	// key is the provider and the body digest or the delivery ID; it is only ever hashed.
	key string
}

// leaseName names the Lease of k: a digest, so no delivery ID (chosen by the sender) reaches
// the API server or its audit log, and any key gives a valid name.
func (k replayKey) leaseName() string {
	sum := sha256.Sum256([]byte(k.kind + "\x00" + k.key))
	return leasePrefix + hex.EncodeToString(sum[:])
}

// claim is a Lease a delivery took, to be given back when the delivery is not acted on.
type claim struct {
	name string
	uid  string
	rv   string
}

// replays is the replay cache every replica shares: one coordination.k8s.io Lease per key in
// the manager's namespace, acquired when a delivery is first seen and valid for the window.
// Creating a Lease is atomic, so of two replicas receiving the same delivery at once only one
// acts.
type replays struct {
	c         client.Client
	namespace string
	window    time.Duration
	max       int
	interval  time.Duration
	now       func() time.Time
}

// errReplayed says a key is remembered by a Lease still within its window.
var errReplayed = errors.New("delivery already handled")

// claimAll takes the Lease of every key. It returns errReplayed when one is held within the
// window, giving back the ones it took; any other error means the check could not be made.
func (r *replays) claimAll(ctx context.Context, keys []replayKey) ([]claim, error) {
	ctx, cancel := context.WithTimeout(ctx, replayTimeout)
	defer cancel()
	var taken []claim
	for _, k := range keys {
		cl, err := r.take(ctx, k)
		if err != nil {
			r.release(ctx, taken)
			return nil, err
		}
		taken = append(taken, cl)
	}
	return taken, nil
}

// take creates k's Lease, or takes over an expired one. A Lease within its window, or one
// another replica took over meanwhile (a conflict), is errReplayed.
func (r *replays) take(ctx context.Context, k replayKey) (claim, error) {
	name := k.leaseName()
	// Three rounds at most: a Lease the sweep deletes between the create and the get is created
	// again.
	for range 3 {
		now := r.now()
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: r.namespace, Name: name, Labels: map[string]string{LabelReplay: k.kind}},
		}
		r.stamp(l, now)
		err := r.c.Create(ctx, l)
		if err == nil {
			return claim{name: name, uid: string(l.UID), rv: l.ResourceVersion}, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return claim{}, fmt.Errorf("create replay Lease %s/%s: %w", r.namespace, name, err)
		}
		if err := r.c.Get(ctx, client.ObjectKeyFromObject(l), l); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return claim{}, fmt.Errorf("read replay Lease %s/%s: %w", r.namespace, name, err)
		}
		if !expired(l, now) {
			return claim{}, errReplayed
		}
		r.stamp(l, now)
		if l.Labels == nil {
			l.Labels = map[string]string{}
		}
		l.Labels[LabelReplay] = k.kind
		// The Update carries the resourceVersion read: of two replicas taking the expired Lease
		// over at once, one gets a conflict.
		switch err := r.c.Update(ctx, l); {
		case err == nil:
			return claim{name: name, uid: string(l.UID), rv: l.ResourceVersion}, nil
		case apierrors.IsConflict(err):
			return claim{}, errReplayed
		case apierrors.IsNotFound(err):
			continue
		default:
			return claim{}, fmt.Errorf("take over replay Lease %s/%s: %w", r.namespace, name, err)
		}
	}
	return claim{}, fmt.Errorf("replay Lease %s/%s keeps disappearing", r.namespace, name)
}

// stamp sets l's window to start at now.
func (r *replays) stamp(l *coordinationv1.Lease, now time.Time) {
	secs := int32(min(math.Ceil(r.window.Seconds()), math.MaxInt32))
	l.Spec = coordinationv1.LeaseSpec{AcquireTime: &metav1.MicroTime{Time: now}, LeaseDurationSeconds: &secs}
}

// expired reports whether l's window has passed at now. A Lease without its times (not written
// by the receiver) counts as expired and is taken over.
func expired(l *coordinationv1.Lease, now time.Time) bool {
	if l.Spec.AcquireTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return true
	}
	return !now.Before(expiry(l))
}

func expiry(l *coordinationv1.Lease) time.Time {
	return l.Spec.AcquireTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)
}

// release gives back the Leases a delivery took and did not act on, so the sender's retry acts.
// Each delete is conditioned on the Lease being the one taken: a Lease another replica took
// over since is left alone. Failures are counted; the Lease then expires with its window.
func (r *replays) release(ctx context.Context, taken []claim) {
	for _, cl := range taken {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: r.namespace, Name: cl.name}}
		uid := types.UID(cl.uid)
		pre := metav1.Preconditions{UID: &uid, ResourceVersion: &cl.rv}
		err := r.c.Delete(ctx, l, &client.DeleteOptions{Preconditions: &pre})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			replayErrors.WithLabelValues(opRelease).Inc()
			logf.FromContext(ctx).WithName("push-receiver").Error(err, "could not give back a replay Lease; it expires with its window", "lease", cl.name)
		}
	}
}

// Sweeper deletes the replay cache's expired Leases and, past the bound, the oldest others. It is
// a manager Runnable that runs on the leader only: one sweeper is enough, and its deletes are
// conditioned on the version it listed, so a Lease a replica takes over meanwhile stays.
type Sweeper struct{ r *replays }

// NeedLeaderElection is true: only the leader sweeps.
func (s *Sweeper) NeedLeaderElection() bool { return true }

// Start sweeps every sweep interval until ctx ends. A failed sweep is logged, counted and tried
// again at the next interval.
func (s *Sweeper) Start(ctx context.Context) error {
	if s.r == nil {
		<-ctx.Done()
		return nil
	}
	log := logf.FromContext(ctx).WithName("push-replay-sweeper")
	t := time.NewTicker(s.r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if _, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			replayErrors.WithLabelValues(opSweep).Inc()
			log.Error(err, "could not sweep the push replay cache; trying again at the next interval", "namespace", s.r.namespace)
		}
	}
}

// Sweep deletes the expired Leases of the cache and, past the bound, the oldest others, and
// reports how many Leases remain.
func (s *Sweeper) Sweep(ctx context.Context) (int, error) {
	r := s.r
	if r == nil {
		return 0, nil
	}
	now := r.now()
	var live []coordinationv1.Lease
	var errs []error
	list := &coordinationv1.LeaseList{}
	opts := []client.ListOption{client.InNamespace(r.namespace), client.HasLabels{LabelReplay}, client.Limit(listPage)}
	for {
		if err := r.c.List(ctx, list, opts...); err != nil {
			return 0, fmt.Errorf("list replay Leases in %s: %w", r.namespace, err)
		}
		for _, l := range list.Items {
			if expired(&l, now) {
				if err := r.remove(ctx, &l); err != nil {
					errs = append(errs, err)
				} else {
					replayRemoved.WithLabelValues("expired").Inc()
				}
				continue
			}
			live = append(live, l)
		}
		if list.Continue == "" {
			break
		}
		opts = []client.ListOption{client.InNamespace(r.namespace), client.HasLabels{LabelReplay}, client.Limit(listPage), client.Continue(list.Continue)}
	}
	if over := len(live) - r.max; over > 0 {
		// Oldest first; past the bound a replay of the oldest deliveries acts again, which only
		// makes the operator re-resolve refs it already follows.
		slices.SortFunc(live, func(a, b coordinationv1.Lease) int {
			return cmp.Or(expiry(&a).Compare(expiry(&b)), cmp.Compare(a.Name, b.Name))
		})
		for i := range over {
			if err := r.remove(ctx, &live[i]); err != nil {
				errs = append(errs, err)
				continue
			}
			replayRemoved.WithLabelValues("bound").Inc()
		}
		live = live[over:]
	}
	replayLeases.Set(float64(len(live)))
	return len(live), errors.Join(errs...)
}

// remove deletes l if it is still the version listed: one taken over since stays.
func (r *replays) remove(ctx context.Context, l *coordinationv1.Lease) error {
	pre := metav1.Preconditions{ResourceVersion: &l.ResourceVersion}
	err := r.c.Delete(ctx, l, &client.DeleteOptions{Preconditions: &pre})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete replay Lease %s/%s: %w", r.namespace, l.Name, err)
	}
	return nil
}
