package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/notify"
)

// rollback ends a progressive rollout at its failed step: the pods the steps reached, and any
// pod that started since the rollout began (it loaded the new content from the store), get the
// last good content back; pods the steps had not reached keep it as they are.
func (r *Reconciler) rollback(ctx context.Context, run *stepRun, why string, problems []podCheck) time.Duration {
	restore := func(p *corev1.Pod) bool {
		uid, known := run.selected[p.Name]
		return run.reached[p.Name] || !known || uid != p.UID
	}
	// The last good content takes the room the failed version's body had.
	run.body.drop()
	if err := run.body.reserve(ctx); err != nil {
		return 0 // the manager is stopping; the next start takes the rollout up again
	}
	return r.rollBack(ctx, run.df, run.hash, run.id, run.startedAt, fmt.Sprintf("%s: %s", why, problemList(problems)), restore)
}

// rollBack rolls back a failed version, in an order that keeps every reader consistent. The
// stored content and the status fields describing it have one owner, the delivery controller,
// so this controller asks it for the last good content rather than writing it behind it:
//  1. status.rollout records the failed version (failedHash/failedCommit) and phase RollingBack:
//     from then on the delivery controller does not store the failed version again, and it
//     takes this as the request to store the last good content again (Decofile.RollingBack);
//  2. the delivery controller checks the kept copy against status.lastGood, writes it back under
//     a new timestamp (pods ignore an update older than the one they serve) and names it in the
//     status, with Ready=False and Stalled=True, reason RolledBack;
//  3. that status write brings the Decofile back here (finishRollback): the pods restore selects
//     are sent the restored content;
//  4. PodsNotified=False, reason RolledBack, naming the failed step and pods, and a Warning Event.
//
// Without an intact last good copy there is nothing to ask for: the rollback fails here, and the
// pods reached keep the failed version.
func (r *Reconciler) rollBack(ctx context.Context, df *decov1alpha1.Decofile, hash, id string, startedAt metav1.Time, why string, restore func(*corev1.Pod) bool) time.Duration {
	log := logf.FromContext(ctx).WithValues("failedHash", hash)
	key := client.ObjectKeyFromObject(df)
	commit := df.Status.Revision()
	// Remembered before the request: the delivery controller may answer before this returns.
	r.pendingRollbacks.Store(key.String(), pendingRollback{id: id, why: why, restore: restore})
	var fresh *decov1alpha1.Decofile
	if err := r.patchStatus(ctx, key, func(d *decov1alpha1.Decofile) bool {
		fresh = nil
		if d.Status.ContentHash != hash {
			return false // newer content arrived: it is rolled out next instead
		}
		fresh = d.DeepCopy()
		ro := decov1alpha1.RolloutStatus{ID: id, StartedAt: &startedAt}
		if d.Status.Rollout != nil {
			ro = *d.Status.Rollout
		}
		ro.FailedHash, ro.FailedID, ro.FailedCommit, ro.Phase = hash, id, commit, PhaseRollingBack
		d.Status.Rollout = &ro
		setCondition(d, metav1.ConditionUnknown, decov1alpha1.ReasonNotificationInProgress, fmt.Sprintf("Rolling back %s: %s", id, why))
		return true
	}); err != nil {
		r.pendingRollbacks.Delete(key.String())
		log.Info("could not record the failed version; will retry", "error", err.Error())
		return r.opts.RetryBase
	}
	if fresh == nil {
		r.pendingRollbacks.Delete(key.String())
		return 0
	}
	log.Info("rolling back", "why", why)
	if _, _, _, err := r.lastGood(ctx, fresh); err != nil {
		r.pendingRollbacks.Delete(key.String())
		return r.endRollback(ctx, fresh, id, ReasonRollbackFailed,
			fmt.Sprintf("Failed to roll back %s: %s; %v, so the pods reached keep it; it is not rolled out further until the source changes", id, why, err), "", nil)
	}
	return 0 // the delivery controller's status write brings the Decofile back (finishRollback)
}

// pendingRollback is what a rollback asked of the delivery controller for, kept until the
// restored content is sent to the pods: which pods get it back and why.
type pendingRollback struct {
	id, why string
	restore func(*corev1.Pod) bool
}

// waitRollback is the rollout of a version a rollback rejected (status.rollout.failedHash): the
// delivery controller has yet to store the last good content again, or could not. A rollback
// cut short by a manager restart needs nothing more here: the delivery controller takes the
// request up at start, and finishRollback sends every pod the restored content.
func (r *Reconciler) waitRollback(ctx context.Context, df *decov1alpha1.Decofile, id string) time.Duration {
	ro := df.Status.Rollout
	ready := meta.FindStatusCondition(df.Status.Conditions, decov1alpha1.ConditionReady)
	if ro.Phase == PhaseRollingBack && ready != nil && ready.Reason == ReasonRollbackFailed && ready.ObservedGeneration == df.Generation {
		r.pendingRollbacks.Delete(client.ObjectKeyFromObject(df).String())
		return r.endRollback(ctx, df, ro.FailedID, ReasonRollbackFailed, "Failed to roll back: "+ready.Message, "", nil)
	}
	if ro.Phase == PhaseRollingBack && !df.RollingBack() {
		// No intact last good copy to ask for (the rollback was cut short before it checked).
		return r.rollBack(ctx, df, ro.FailedHash, id, metav1.Now(), "an interrupted rollback was resumed", func(*corev1.Pod) bool { return true })
	}
	return 0
}

// finishRollback sends the content the delivery controller stored again for a rollback to the
// pods the failed version may have reached, and ends the rollback. After a manager restart,
// which pods those were is no longer known: every pod gets it.
func (r *Reconciler) finishRollback(ctx context.Context, df *decov1alpha1.Decofile, body *pushBody) time.Duration {
	key := client.ObjectKeyFromObject(df).String()
	ro := df.Status.Rollout
	p := pendingRollback{id: ro.FailedID, why: "an interrupted rollback was resumed", restore: func(*corev1.Pod) bool { return true }}
	if v, ok := r.pendingRollbacks.Load(key); ok && v.(pendingRollback).id == ro.FailedID {
		p = v.(pendingRollback)
	}
	goodID := decov1alpha1.RolloutID(&df.Status)
	loader, ok := r.opts.Loaders[df.TargetOrDefault()]
	if !ok {
		return r.endRollback(ctx, df, p.id, ReasonRolledBack, fmt.Sprintf("Rolled back %s: %s; the store is back on %s, but no loader for target %q can send it to the pods", p.id, p.why, goodID, df.TargetOrDefault()), "", nil)
	}
	content, err := r.load(ctx, loader, df)
	if errors.Is(err, ErrNotYetStored) {
		return notYetStoredDelay
	}
	var res notify.Result
	var led *ledger
	if err == nil {
		body.set(content)
		var token string
		if token, err = r.reloadToken(ctx, df); err == nil {
			var pods []corev1.Pod
			var view *podView
			if pods, view, err = listPods(ctx, r.reader, df, podListMaxAge(r.notifier.Config().Backoff)); err == nil {
				all := make([]notify.Pod, len(pods))
				var targets []notify.Pod
				for i := range pods {
					if all[i] = Target(&pods[i]); p.restore(&pods[i]) {
						targets = append(targets, all[i])
					}
				}
				n := notify.Rollout{ID: "rollback of " + p.id, Protocol: r.opts.Protocol, Timestamp: df.Status.Timestamp, Token: token,
					Pods: targets, Refresh: view.refresh}
				if r.opts.Protocol == notify.ProtocolPush {
					n.Body = body.body
				}
				res = r.notifier.Run(ctx, n)
				led = r.newLedger(df, df.Status.ContentHash, pods, all)
				led.settle(res.Pods)
			}
		}
	}
	if ctx.Err() != nil {
		return 0 // stopped or superseded; the pending rollback is resumed by the next run
	}
	r.pendingRollbacks.Delete(key)
	msg := fmt.Sprintf("Rolled back %s: %s; the store and %d pods are back on %s", p.id, p.why, res.Notified, goodID)
	notified := df.Status.ContentHash
	switch {
	case err != nil:
		msg += fmt.Sprintf("; the pods could not be told: %v", err)
		notified = ""
	case !res.Succeeded():
		msg += fmt.Sprintf("; %d pods did not take it back (%s)", res.Failed, failureReason(res, r.notifier.Config().Timeout))
		notified = "" // the regular rollout retries them with backoff
	}
	return r.endRollback(ctx, df, p.id, ReasonRolledBack, msg, notified, led.counts())
}

// endRollback records the end of a rollback: PodsNotified=False with reason and message, the
// phase, and a Warning Event. notified is the hash every pod now holds ("" when unknown);
// counts, when known, the pods by the content they hold.
func (r *Reconciler) endRollback(ctx context.Context, df *decov1alpha1.Decofile, id, reason, msg, notified string, counts []decov1alpha1.ConfirmedContent) time.Duration {
	rolloutsTotal.WithLabelValues("rolled_back").Inc()
	finished := metav1.Now()
	phase := PhaseRolledBack
	if reason == ReasonRollbackFailed {
		phase = PhaseFailed
	}
	err := r.patchStatus(ctx, client.ObjectKeyFromObject(df), func(d *decov1alpha1.Decofile) bool {
		setCondition(d, metav1.ConditionFalse, reason, msg)
		if reason == ReasonRolledBack {
			d.Status.NotifiedHash = notified
		}
		if ro := d.Status.Rollout; ro != nil && ro.ID == id {
			next := *ro
			next.Phase, next.FinishedAt = phase, &finished
			if counts != nil {
				next.Confirmed = counts
			}
			d.Status.Rollout = &next
			result := ResultRolledBack
			if phase == PhaseFailed {
				result = ResultFailed
			}
			recordHistory(d, &next, next.FailedHash, result, finished)
		}
		return true
	})
	if err != nil {
		logf.FromContext(ctx).Info("could not record the rollback", "error", err.Error())
	}
	r.forget(client.ObjectKeyFromObject(df).String())
	r.recorder.Eventf(df, nil, corev1.EventTypeWarning, reason, "Rollback", "%s", msg)
	logf.FromContext(ctx).Info("progressive rollout rolled back", "reason", reason, "message", msg)
	return 0
}
