package rollout

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/controller"
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

// resumeRollback finishes a rollback that did not end (the manager stopped during it): the
// status still names the failed version. Every pod gets the last good content, since which of
// them the failed version reached is no longer known.
func (r *Reconciler) resumeRollback(ctx context.Context, df *decov1alpha1.Decofile, hash, id string) time.Duration {
	return r.rollBack(ctx, df, hash, id, metav1.Now(), "an interrupted rollback was resumed", func(*corev1.Pod) bool { return true })
}

// rollBack restores the last good content, in an order that keeps every reader consistent:
//  1. status.rollout.failedHash/failedCommit first: from then on the delivery controller does not
//     store the failed version again, whatever it finds in the ConfigMap meanwhile;
//  2. the ConfigMap (for s3, the object) gets the last good stored value back, under a new
//     timestamp (pods ignore an update older than the one they serve), so pods that start load
//     the good content;
//  3. the status names the restored content (contentHash, storedHash, timestamp, commit);
//  4. the pods restore selects are sent it;
//  5. PodsNotified=False, reason RolledBack, naming the failed step and pods, and a Warning Event.
func (r *Reconciler) rollBack(ctx context.Context, df *decov1alpha1.Decofile, hash, id string, startedAt metav1.Time, why string, restore func(*corev1.Pod) bool) time.Duration {
	log := logf.FromContext(ctx).WithValues("failedHash", hash)
	key := client.ObjectKeyFromObject(df)
	commit := df.Status.Revision()
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
		log.Info("could not record the failed version; will retry", "error", err.Error())
		return r.opts.RetryBase
	}
	if fresh == nil {
		return 0
	}
	log.Info("rolling back", "why", why)

	lg, good, value, err := r.lastGood(ctx, fresh)
	if err != nil {
		return r.endRollback(ctx, fresh, id, ReasonRollbackFailed,
			fmt.Sprintf("Failed to roll back %s: %s; %v, so the pods reached keep it; it is not rolled out further until the source changes", id, why, err), "")
	}
	ts := max(time.Now().Unix(), fresh.Status.Timestamp+1, lg.Timestamp+1)
	if err := r.restoreStored(ctx, fresh, lg, good, value, ts); err != nil {
		log.Info("could not restore the stored content; will retry", "error", err.Error())
		return r.opts.RetryBase // the status still names the failed version: the retry resumes the rollback
	}
	var goodID string
	if err := r.patchStatus(ctx, key, func(d *decov1alpha1.Decofile) bool {
		goodID = ""
		if d.Status.ContentHash != hash {
			return false
		}
		s := &d.Status
		s.ContentHash, s.StoredHash, s.Format, s.RawBytes, s.StoredBytes, s.Timestamp = lg.ContentHash, lg.StoredHash, lg.Format, lg.RawBytes, lg.StoredBytes, ts
		s.SourceType, s.GitHubCommit, s.ShortCommit = lg.SourceType, lg.GitHubCommit, shortSHA(lg.GitHubCommit)
		now := metav1.Now()
		s.LastUpdated = &now
		s.Artifact = decov1alpha1.StoredArtifact(s, lg.SourceRevision())
		if d.TargetOrDefault() == decov1alpha1.TargetConfigMap {
			s.ConfigMapName = d.ConfigMapName()
		}
		// Claimed now, confirmed below: a reconcile in between must not start a rollout of the
		// restored content beside this one.
		s.NotifiedHash = lg.ContentHash
		goodID = decov1alpha1.RolloutID(s)
		// The desired version is not what pods serve, and will not be until the source changes:
		// kstatus (Flux health checks, kubectl wait, Argo CD) reads Failed, not Current.
		msg := fmt.Sprintf("rolled back to %s (stored again at timestamp %d): %s failed its progressive rollout; the source's version is not stored again until it changes", goodID, ts, id)
		for _, t := range []string{decov1alpha1.ConditionReady, decov1alpha1.ConditionStalled} {
			status := metav1.ConditionFalse
			if t == decov1alpha1.ConditionStalled {
				status = metav1.ConditionTrue
			}
			meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: t, Status: status, Reason: ReasonRolledBack, Message: msg, ObservedGeneration: d.Generation})
		}
		meta.RemoveStatusCondition(&s.Conditions, decov1alpha1.ConditionReconciling)
		return true
	}); err != nil {
		log.Info("could not record the restored content; will retry", "error", err.Error())
		return r.opts.RetryBase
	}
	if goodID == "" {
		return 0 // newer content arrived
	}

	token, err := r.reloadToken(ctx, fresh)
	var res notify.Result
	if err == nil {
		var pods []corev1.Pod
		var view *podView
		if pods, view, err = listPods(ctx, r.reader, fresh, podListMaxAge(r.notifier.Config().Backoff)); err == nil {
			var targets []notify.Pod
			for i := range pods {
				if restore(&pods[i]) {
					targets = append(targets, Target(&pods[i]))
				}
			}
			ro := notify.Rollout{ID: "rollback of " + id, Protocol: r.opts.Protocol, Timestamp: ts, Token: token,
				Pods: targets, Refresh: view.refresh}
			if r.opts.Protocol == notify.ProtocolPush {
				ro.Body = notify.PushBody(ts, good)
			}
			res = r.notifier.Run(ctx, ro)
		}
	}
	msg := fmt.Sprintf("Rolled back %s: %s; the store and %d pods are back on %s", id, why, res.Notified, goodID)
	notified := lg.ContentHash
	switch {
	case err != nil:
		msg += fmt.Sprintf("; the pods could not be told: %v", err)
		notified = ""
	case !res.Succeeded():
		msg += fmt.Sprintf("; %d pods did not take it back (%s)", res.Failed, failureReason(res, r.notifier.Config().Timeout))
		notified = "" // the regular rollout retries them with backoff
	}
	return r.endRollback(ctx, fresh, id, ReasonRolledBack, msg, notified)
}

// restoreStored puts the last good content back where df's target keeps it: the ConfigMap (its
// stored value, as it was), or the target's LastGoodStore (s3: the object is uploaded again).
func (r *Reconciler) restoreStored(ctx context.Context, df *decov1alpha1.Decofile, lg *decov1alpha1.StoredContent, good []byte, value string, ts int64) error {
	if store, ok := r.lastGoodStore(df); ok {
		return store.Restore(ctx, df, good, lg.ContentHash, ts)
	}
	return controller.RestoreConfigMap(ctx, r.client, r.reader, df, lg.Format, value, lg.ContentHash, ts)
}

// endRollback records the end of a rollback: PodsNotified=False with reason and message, the
// phase, and a Warning Event. notified is the hash every pod now holds ("" when unknown).
func (r *Reconciler) endRollback(ctx context.Context, df *decov1alpha1.Decofile, id, reason, msg, notified string) time.Duration {
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

func shortSHA(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}
