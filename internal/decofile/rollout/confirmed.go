package rollout

import (
	"cmp"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/notify"
)

// confirmations remembers, per Decofile, which content each of its pods (by UID) last confirmed,
// so the status can say how many pods hold which content without anyone asking the pods.
type confirmations struct {
	mu sync.Mutex
	m  map[client.ObjectKey]map[string]string
}

// last is the content the pod uid of the Decofile at key last confirmed, "" when not known.
func (c *confirmations) last(key client.ObjectKey, uid string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[key][uid]
}

// keep records what the pods of the Decofile at key last confirmed, in place of what was known
// (pods gone since are let go with it).
func (c *confirmations) keep(key client.ObjectKey, byUID map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[client.ObjectKey]map[string]string{}
	}
	c.m[key] = byUID
}

// forget lets go of what the Decofile at key's pods confirmed (it was deleted).
func (c *confirmations) forget(key client.ObjectKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, key)
}

// ledger follows, during one rollout of content hash, which content each selected pod holds:
// what it confirmed before the rollout, and hash once it confirms it.
type ledger struct {
	key  client.ObjectKey
	hash string
	// pods in the order they were selected; skipped ones are left out of the counts.
	pods   []ledgerPod
	byName map[string]int
	memory *confirmations
}

type ledgerPod struct {
	name, uid string
	// held is the content the pod last confirmed ("" unknown); skipped: not a target.
	held    string
	skipped bool
}

// newLedger starts the ledger of a rollout of hash to pods (targets: their Target, in the same
// order; a skipped one is left out of the counts). What a pod held before comes from
// what this manager saw it confirm; failing that, a pod older than the end of the last rollout
// every pod confirmed holds that rollout's content (status.notifiedHash).
func (r *Reconciler) newLedger(df *decov1alpha1.Decofile, hash string, pods []corev1.Pod, targets []notify.Pod) *ledger {
	l := &ledger{key: client.ObjectKeyFromObject(df), hash: hash, byName: map[string]int{}, memory: &r.confirmed}
	var confirmedAt *metav1.Time
	if c := meta.FindStatusCondition(df.Status.Conditions, decov1alpha1.ConditionPodsNotified); c != nil &&
		c.Status == metav1.ConditionTrue && df.Status.Rollout != nil && df.Status.NotifiedHash != "" {
		confirmedAt = df.Status.Rollout.FinishedAt
	}
	for i := range pods {
		p := &pods[i]
		held := r.confirmed.last(l.key, string(p.UID))
		if held == "" && confirmedAt != nil && !p.CreationTimestamp.After(confirmedAt.Time) {
			held = df.Status.NotifiedHash
		}
		l.byName[p.Name] = len(l.pods)
		l.pods = append(l.pods, ledgerPod{name: p.Name, uid: string(p.UID), held: held, skipped: targets[i].SkipReason != ""})
	}
	return l
}

// settle takes in the outcome of notifying some of the pods: those that confirmed now hold the
// rollout's content, those skipped leave the counts. It remembers the result for later rollouts.
func (l *ledger) settle(results []notify.PodResult) {
	if l == nil {
		return
	}
	for _, res := range results {
		i, ok := l.byName[res.Name]
		if !ok {
			continue
		}
		switch res.Outcome {
		case notify.Notified:
			l.pods[i].held, l.pods[i].skipped = l.hash, false
		case notify.Skipped:
			l.pods[i].skipped = true
		}
	}
	byUID := make(map[string]string, len(l.pods))
	for _, p := range l.pods {
		if p.held != "" && p.uid != "" {
			byUID[p.uid] = p.held
		}
	}
	l.memory.keep(l.key, byUID)
}

// held is the content the pod name last confirmed, "" when not known.
func (l *ledger) held(name string) string {
	if l == nil {
		return ""
	}
	if i, ok := l.byName[name]; ok {
		return l.pods[i].held
	}
	return ""
}

// counts is how many of the targeted pods last confirmed which content, most pods first; among
// equals the rollout's content first and the unknown last. Nil without pods.
func (l *ledger) counts() []decov1alpha1.ConfirmedContent {
	if l == nil {
		return nil
	}
	n := map[string]int32{}
	for _, p := range l.pods {
		if !p.skipped {
			n[p.held]++
		}
	}
	out := make([]decov1alpha1.ConfirmedContent, 0, len(n))
	for h, c := range n {
		out = append(out, decov1alpha1.ConfirmedContent{ContentHash: h, Pods: c})
	}
	// rank puts the rollout's content first and the unknown last among equal counts.
	rank := func(h string) int {
		switch h {
		case l.hash:
			return 0
		case "":
			return 2
		}
		return 1
	}
	slices.SortFunc(out, func(a, b decov1alpha1.ConfirmedContent) int {
		return cmp.Or(cmp.Compare(b.Pods, a.Pods), cmp.Compare(rank(a.ContentHash), rank(b.ContentHash)), cmp.Compare(a.ContentHash, b.ContentHash))
	})
	if len(out) > decov1alpha1.MaxConfirmedContents {
		out = out[:decov1alpha1.MaxConfirmedContents]
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
