package rollout

import (
	"context"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/notify"
)

// summary is the status of rollout id with counts p.
func summary(id string, p notify.Progress, started, finished *metav1.Time) *decov1alpha1.RolloutStatus {
	return &decov1alpha1.RolloutStatus{ID: id, Total: int32(p.Total), Notified: int32(p.Notified), Failed: int32(p.Failed),
		Skipped: int32(p.Skipped), StartedAt: started, FinishedAt: finished}
}

// Results recorded in status.history.
const (
	ResultSucceeded  = decov1alpha1.RolloutSucceeded
	ResultFailed     = decov1alpha1.RolloutFailed
	ResultRolledBack = decov1alpha1.RolloutRolledBack
)

// recordHistory puts the end of rollout ro (of content hash) first in status.history, keeping
// MaxHistory entries; a rollout that ends as the newest entry did (same version, same result)
// is counted in it.
func recordHistory(d *decov1alpha1.Decofile, ro *decov1alpha1.RolloutStatus, hash, result string, finished metav1.Time) {
	rec := decov1alpha1.RolloutRecord{ID: ro.ID, ContentHash: hash, Result: result, FinishedAt: finished, Pods: ro.Total, PodsConfirmed: ro.Notified, Count: 1}
	if ro.StartedAt != nil {
		rec.Duration = &metav1.Duration{Duration: finished.Sub(ro.StartedAt.Time).Round(time.Millisecond)}
	}
	h := d.Status.History
	if len(h) > 0 && h[0].ID == rec.ID && h[0].ContentHash == hash && h[0].Result == result {
		rec.Count = h[0].Count + 1
		h = h[1:]
	}
	d.Status.History = append([]decov1alpha1.RolloutRecord{rec}, h[:min(len(h), decov1alpha1.MaxHistory-1)]...)
}

// podsBehind is the first MaxPodsBehind failed pods of res, with their reasons and (from led,
// when set) the content each still holds.
func podsBehind(res notify.Result, led *ledger) []decov1alpha1.PodBehind {
	var out []decov1alpha1.PodBehind
	for _, p := range res.FailedPods() {
		if len(out) == decov1alpha1.MaxPodsBehind {
			break
		}
		reason := p.Reason
		if len(reason) > 256 {
			reason = strings.ToValidUTF8(reason[:253], "") + "..." // cut within a rune: drop its start
		}
		out = append(out, decov1alpha1.PodBehind{Name: p.Name, Reason: reason, HTTPStatus: int32(p.Status), Attempts: int32(p.Attempts), ConfirmedHash: led.held(p.Name)})
	}
	return out
}

// recordProgress writes the running counts (the notifier calls it at most about once a second).
func (r *Reconciler) recordProgress(ctx context.Context, key client.ObjectKey, id string, p notify.Progress) {
	r.updateRunning(ctx, key, id, "progress", func(next *decov1alpha1.RolloutStatus) { setCounts(next, p) })
}

// updateRunning changes the status of rollout id while it runs, writing only when update changed
// something; what could not be written is logged (the next update or the result carries it).
func (r *Reconciler) updateRunning(ctx context.Context, key client.ObjectKey, id, what string, update func(*decov1alpha1.RolloutStatus)) {
	err := r.patchStatus(ctx, key, func(d *decov1alpha1.Decofile) bool {
		ro := d.Status.Rollout
		if ro == nil || ro.ID != id || ro.FinishedAt != nil {
			return false
		}
		next := *ro
		update(&next)
		if equality.Semantic.DeepEqual(next, *ro) {
			return false
		}
		d.Status.Rollout = &next
		return true
	})
	if err != nil {
		logf.FromContext(ctx).Info("could not record the rollout's "+what, "error", err.Error())
	}
}

// setCounts copies the notifier's counts into a rollout status.
func setCounts(ro *decov1alpha1.RolloutStatus, p notify.Progress) {
	ro.Total, ro.Notified, ro.Failed, ro.Skipped = int32(p.Total), int32(p.Notified), int32(p.Failed), int32(p.Skipped)
}

// beginRollout records the start of rollout id to total pods: PodsNotified=Unknown and a new
// status.rollout.
func beginRollout(id string, total int, startedAt *metav1.Time) func(*decov1alpha1.Decofile) bool {
	return func(d *decov1alpha1.Decofile) bool {
		changed := setCondition(d, metav1.ConditionUnknown, decov1alpha1.ReasonNotificationInProgress, "Notifying pods for "+id)
		ro := &decov1alpha1.RolloutStatus{ID: id, Total: int32(total), StartedAt: startedAt}
		if d.Status.Rollout == nil || !equality.Semantic.DeepEqual(*d.Status.Rollout, *ro) {
			d.Status.Rollout, changed = ro, true
		}
		return changed
	}
}

// then is mutate preceded by begin, a start not written yet (nil: written already): the status
// ends as if both had been written one after the other, condition transition time included.
func then(begin, mutate func(*decov1alpha1.Decofile) bool) func(*decov1alpha1.Decofile) bool {
	if begin == nil {
		return mutate
	}
	return func(d *decov1alpha1.Decofile) bool {
		began := begin(d)
		return mutate(d) || began
	}
}

func setCondition(d *decov1alpha1.Decofile, status metav1.ConditionStatus, reason, msg string) bool {
	return meta.SetStatusCondition(&d.Status.Conditions, metav1.Condition{
		Type: decov1alpha1.ConditionPodsNotified, Status: status, Reason: reason, Message: msg, ObservedGeneration: d.Generation,
	})
}

// patchStatus applies mutate to the current Decofile and writes its status under an optimistic
// lock (decofilecontroller.StatusWriter), retrying on conflict: the delivery controller writes other
// status fields of the same object. Nothing is written when mutate reports no change or the
// status ends as it was. The Decofile is read from the manager's cache, which holds it without
// its inline content: a status write needs no more, and a read of the whole object from the API
// server is as costly as the write. A cache behind the API server makes the patch conflict, and
// the retry reads from the API server.
func (r *Reconciler) patchStatus(ctx context.Context, key client.ObjectKey, mutate func(*decov1alpha1.Decofile) bool) error {
	fresh := false
	var uid types.UID
	return retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		d, err := r.current(ctx, key, fresh)
		fresh = true
		if err != nil {
			return client.IgnoreNotFound(err)
		}
		if uid == "" {
			uid = d.UID
		} else if d.UID != uid {
			// Deleted and created again under the name since the first read: the change was
			// decided for the old Decofile, and the new one gets a reconcile of its own.
			return nil
		}
		old := d.Status.DeepCopy()
		if !mutate(d) {
			return nil
		}
		rv, err := r.status.Write(ctx, d, old, &d.Status) // its error names the Decofile
		r.written.Wrote(key, rv)
		return err
	})
}

// current reads the Decofile a status change starts from: from the manager's cache unless fresh
// is set or the cache may not have this controller's last status write yet, from the API server
// then. A mutation deciding from a cache without its own last write could find nothing to do
// (a step recorded on a rollout the cache does not show started yet) and write nothing.
func (r *Reconciler) current(ctx context.Context, key client.ObjectKey, fresh bool) (*decov1alpha1.Decofile, error) {
	if !fresh {
		d := &decov1alpha1.Decofile{}
		if err := r.client.Get(ctx, key, d); err != nil {
			if apierrors.IsNotFound(err) {
				r.written.Forget(key)
			}
			return nil, err
		}
		if _, pending := r.written.Pending(key, d.ResourceVersion); !pending {
			return d, nil
		}
	}
	d := &decov1alpha1.Decofile{}
	if err := r.reader.Get(ctx, key, d); err != nil {
		return nil, err
	}
	r.written.Pending(key, d.ResourceVersion) // read after the write: forgets it
	return d, nil
}
