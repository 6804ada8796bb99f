package failover

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/siteops/siteops/internal/tenant/acl"
)

// Resyncer re-applies the managed tenants' ACL users.
type Resyncer interface {
	// ResyncAll applies every user on the master and every replica, asking the Sentinel at prefer
	// first for the node list.
	ResyncAll(ctx context.Context, prefer string) error
	// ResyncNode applies every user on the node at addr.
	ResyncNode(ctx context.Context, prefer, addr string) error
}

// Counter is the part of a Prometheus counter the watcher uses.
type Counter interface{ Inc() }

// Recorder records Events (the events.k8s.io API's recorder signature).
type Recorder interface {
	Eventf(regarding runtime.Object, related runtime.Object, eventtype, reason, action, note string, args ...any)
}

// ReasonFailover is the Event reason for Sentinels moving the master; every tenant's ACL user
// is applied on the new one.
const ReasonFailover = "ValkeyFailover"

// Watcher subscribes to every Sentinel and drives a Resyncer. It is a manager Runnable.
type Watcher struct {
	// Sentinels are the Sentinel addresses; each gets its own subscription.
	Sentinels []string
	// MasterName filters messages to the monitored master.
	MasterName string
	// Client opens a Sentinel client for an address.
	Client func(addr string) *redis.SentinelClient
	// Resyncer applies users.
	Resyncer Resyncer
	// Failovers counts each failover once, however many Sentinels announce it.
	Failovers Counter
	// Events records a Warning per failover on Namespace (the manager's own: a failover concerns
	// the platform, not one tenant); nil records none.
	Events    Recorder
	Namespace string
	// RetryBackoff bounds the retry of failed resyncs; default 200ms doubling to 10s.
	RetryBackoff wait.Backoff

	mu      sync.Mutex
	current string // master the last counted switch went to
	all     bool
	prefer  string
	nodes   map[string]bool
	wake    chan struct{}
	// subscribed is closed when every Sentinel subscription has been confirmed once (for tests).
	subscribed chan struct{}
	onceInit   sync.Once
}

func (w *Watcher) init() {
	w.onceInit.Do(func() {
		w.wake = make(chan struct{}, 1)
		w.nodes = map[string]bool{}
		w.subscribed = make(chan struct{})
		if w.RetryBackoff.Duration == 0 {
			w.RetryBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 1 << 30, Cap: 10 * time.Second}
		}
	})
}

// Subscribed is closed once every Sentinel confirmed the subscription (a Sentinel that is down
// at start does not hold it back forever: it is skipped after its first failure).
func (w *Watcher) Subscribed() <-chan struct{} { w.init(); return w.subscribed }

// NeedLeaderElection makes only the leader act on failovers.
func (w *Watcher) NeedLeaderElection() bool { return true }

// Start subscribes to every Sentinel and handles messages until ctx ends.
func (w *Watcher) Start(ctx context.Context) error {
	w.init()
	log := logf.FromContext(ctx).WithName("sentinel-watch")
	ctx = logf.IntoContext(ctx, log)
	msgs := make(chan message, 64)
	var wg sync.WaitGroup
	var ready sync.WaitGroup
	for _, addr := range w.Sentinels {
		wg.Add(1)
		ready.Add(1)
		go func() {
			defer wg.Done()
			w.subscribe(ctx, log, addr, msgs, ready.Done)
		}()
	}
	go func() { ready.Wait(); close(w.subscribed) }()
	wg.Add(1)
	go func() { defer wg.Done(); w.work(ctx, log) }()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return nil
		case m := <-msgs:
			w.handle(log, m)
		}
	}
}

type message struct {
	sentinel, channel, payload string
}

// subscribe keeps one Sentinel's subscription alive, reconnecting with backoff.
func (w *Watcher) subscribe(ctx context.Context, log logr.Logger, addr string, out chan<- message, ready func()) {
	readyOnce := sync.OnceFunc(ready)
	defer readyOnce()
	backoff := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 1 << 30, Cap: 10 * time.Second}
	for ctx.Err() == nil {
		err := w.subscribeOnce(ctx, addr, out, readyOnce)
		if ctx.Err() != nil {
			return
		}
		readyOnce()
		d := backoff.Step()
		log.Error(err, "Sentinel subscription lost; reconnecting", "sentinel", addr, "retryIn", d)
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
}

func (w *Watcher) subscribeOnce(ctx context.Context, addr string, out chan<- message, ready func()) error {
	sc := w.Client(addr)
	defer sc.Close()
	ps := sc.Subscribe(ctx, Channels...)
	defer ps.Close()
	// Reads do not watch ctx; closing the subscription is what ends a blocked read.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	for range Channels {
		if _, err := ps.ReceiveTimeout(ctx, 5*time.Second); err != nil {
			return fmt.Errorf("subscribe to sentinel %s: %w", addr, err)
		}
	}
	ready()
	for {
		msg, err := ps.ReceiveTimeout(ctx, 30*time.Second)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			// A quiet Sentinel is normal: ping it to tell silence from a dead connection.
			if ne, ok := err.(interface{ Timeout() bool }); ok && ne.Timeout() {
				if perr := ps.Ping(ctx); perr != nil {
					return fmt.Errorf("ping sentinel %s: %w", addr, perr)
				}
				continue
			}
			return fmt.Errorf("receive from sentinel %s: %w", addr, err)
		}
		if m, ok := msg.(*redis.Message); ok {
			select {
			case out <- message{sentinel: addr, channel: m.Channel, payload: m.Payload}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

// handle deduplicates a message and records the work it asks for. Each Sentinel announces the
// same failover; a switch to the master the last counted switch went to is a repeat.
func (w *Watcher) handle(log logr.Logger, m message) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch m.channel {
	case ChannelSwitchMaster:
		sw, err := ParseSwitch(m.payload)
		if err != nil {
			log.Error(err, "ignoring Sentinel message", "sentinel", m.sentinel)
			return
		}
		if sw.Master != w.MasterName || sw.New == w.current {
			return
		}
		w.current = sw.New
		if w.Failovers != nil {
			w.Failovers.Inc()
		}
		log.Info("Sentinel failover: resyncing every tenant", "from", sw.Old, "to", sw.New, "sentinel", m.sentinel)
		if w.Events != nil {
			w.Events.Eventf(&corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: w.Namespace}},
				nil, corev1.EventTypeWarning, ReasonFailover, "Failover",
				"Sentinel failover of %s: the master moved from %s to %s; every tenant's ACL user is applied on it and its replicas", sw.Master, sw.Old, sw.New)
		}
		w.all, w.prefer = true, m.sentinel
	default:
		ev, ok := ParseNodeEvent(m.channel, m.payload)
		if !ok || ev.Master != w.MasterName {
			return
		}
		log.Info("Valkey node changed: resyncing it", "event", ev.Channel, "node", ev.Addr, "sentinel", m.sentinel)
		w.nodes[ev.Addr] = true
		if w.prefer == "" {
			w.prefer = m.sentinel
		}
	}
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// work runs resyncs one batch at a time, coalescing everything that arrived meanwhile, and
// retries a failed batch with backoff.
func (w *Watcher) work(ctx context.Context, log logr.Logger) {
	backoff := w.RetryBackoff
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		}
		w.mu.Lock()
		all, prefer, nodes := w.all, w.prefer, w.nodes
		w.all, w.prefer, w.nodes = false, "", map[string]bool{}
		w.mu.Unlock()
		var failed []string
		var err error
		if all {
			if err = w.Resyncer.ResyncAll(ctx, prefer); err != nil {
				failed = append(failed, "")
			}
		} else {
			for addr := range nodes {
				e := w.Resyncer.ResyncNode(ctx, prefer, addr)
				// A node outside the allow-list was reported and refused already; asking again
				// would only repeat the refusal.
				if untrusted := (*acl.UntrustedNodeError)(nil); errors.As(e, &untrusted) {
					continue
				}
				if e != nil {
					err = e
					failed = append(failed, addr)
				}
			}
		}
		if len(failed) == 0 {
			backoff = w.RetryBackoff
			continue
		}
		d := backoff.Step()
		log.Error(err, "tenant resync after a Sentinel event failed; retrying", "retryIn", d)
		w.mu.Lock()
		for _, a := range failed {
			if a == "" {
				w.all = true
			} else {
				w.nodes[a] = true
			}
		}
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}
