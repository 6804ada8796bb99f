package rollout

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/notify"
	"github.com/siteops/siteops/internal/decofile/rollout/plan"
)

// Phases of a progressive rollout, in status.rollout.phase.
const (
	PhaseNotifying   = "Notifying"
	PhasePausing     = "Pausing"
	PhaseChecking    = "Checking"
	PhaseRollingBack = decov1alpha1.PhaseRollingBack
	PhaseRolledBack  = "RolledBack"
	PhaseSucceeded   = "Succeeded"
	PhaseFailed      = "Failed"
)

// PodsNotified reasons of progressive rollouts.
const (
	// ReasonRolledBack: a step failed; the pods it reached and the store got the last good
	// content back, and the failed version is not rolled out again until the source changes.
	ReasonRolledBack = decov1alpha1.ReasonRolledBack
	// ReasonRollbackFailed: a step failed and there was no intact last good content to go back
	// to (or restoring it failed); the pods reached keep the failed version.
	ReasonRollbackFailed = decov1alpha1.ReasonRollbackFailed
	// ReasonInvalidRollout: spec.rollout cannot be planned (a Decofile stored past the CRD rules).
	ReasonInvalidRollout = "InvalidRollout"
)

// DefaultPause is the pause between steps when spec.rollout.pause is unset.
const DefaultPause = 30 * time.Second

// stepRun is one progressive rollout of one version in progress.
type stepRun struct {
	df        *decov1alpha1.Decofile
	key       client.ObjectKey
	hash, id  string
	startedAt metav1.Time
	// selected are the pods at the start, by name; pods found later are restored on rollback.
	selected map[string]types.UID
	// reached are the pods sent the version so far (whatever they answered).
	reached map[string]bool
	acc     notify.Progress
	// begin is the start of the rollout when it is not written yet (no pods): written with the
	// result.
	begin func(*decov1alpha1.Decofile) bool
	// body is what the steps send; a rollback holds its memory for the last good content.
	body *pushBody
	// led follows what each pod holds.
	led *ledger
}

// progressive notifies the pods step by step (spec.rollout.steps), pauses after each step but
// the last, checks every pod reached so far, and rolls back at the first failure. Pods that
// cannot be notified at the start (not running, no IP) are counted as skipped and left out of
// the plan; the steps cover the others, in name order. begin is the rollout's start when it is
// not written yet.
func (r *Reconciler) progressive(ctx context.Context, df *decov1alpha1.Decofile, hash, id string, ro notify.Rollout, body *pushBody, pods []corev1.Pod, led *ledger, startedAt metav1.Time, begin func(*decov1alpha1.Decofile) bool) time.Duration {
	log := logf.FromContext(ctx)
	run := &stepRun{df: df, key: client.ObjectKeyFromObject(df), hash: hash, id: id, startedAt: startedAt,
		selected: map[string]types.UID{}, reached: map[string]bool{}, begin: begin, body: body, led: led}
	var eligible []notify.Pod
	for i := range pods {
		run.selected[pods[i].Name] = pods[i].UID
		if t := ro.Pods[i]; t.SkipReason == "" { // ro.Pods[i] is pods[i]'s target
			eligible = append(eligible, t)
		} else {
			run.acc.Skipped++
		}
	}
	run.acc.Total = len(pods)
	spec := df.Spec.Rollout
	sizes, err := plan.Sizes(spec.Steps, len(eligible))
	if err == nil && spec.Check != nil {
		err = ValidCheckPath(spec.Check.Path)
	}
	if err != nil {
		if begin != nil {
			_ = r.patchStatus(ctx, run.key, begin) // a rare error: the start stays a write of its own
		}
		return r.fail(ctx, df, id, hash, nil, nil, ReasonInvalidRollout, err.Error(), startedAt.Time)
	}
	pause := DefaultPause
	if spec.Pause != nil {
		pause = spec.Pause.Duration
	}

	runCtx, stopWatch := r.watchSupersede(ctx, run.key, hash)
	defer stopWatch()
	steps := len(sizes)
	prev := 0
	for i, size := range sizes {
		step := int32(i + 1)
		batch := eligible[prev:size]
		r.recordStep(ctx, run, step, int32(steps), int32(prev), PhaseNotifying)
		base := run.acc
		sro := ro
		sro.Pods = batch
		sro.Progress = func(p notify.Progress) { r.recordProgress(ctx, run.key, id, plus(base, p)) }
		var err error
		if sro.Body, err = body.get(runCtx); err != nil {
			if stopped(ctx, runCtx) || r.superseded(ctx, run.key, hash) {
				return 0 // newer content replaced the stored one during the pause: not a failure
			}
			return r.fail(ctx, df, id, hash, &notify.Result{Progress: run.acc}, led, loadFailureReason(err), fmt.Sprintf("step %d/%d: %v", step, steps, err), startedAt.Time)
		}
		log.Info("notifying pods", "step", step, "of", steps, "pods", len(batch))
		res := r.notifier.Run(runCtx, sro)
		sro.Body = nil
		if i < steps-1 {
			body.drop() // nothing is held while the rollout pauses and checks
		}
		if stopped(ctx, runCtx) {
			log.Info("progressive rollout superseded by a newer change or stopped", "step", step)
			return 0
		}
		run.acc = plus(base, res.Progress)
		led.settle(res.Pods)
		for _, p := range batch {
			run.reached[p.Name] = true
		}
		countNotifications(res.Progress)
		if failed := res.FailedPods(); len(failed) > 0 {
			problems := make([]podCheck, len(failed))
			for j, f := range failed {
				problems[j] = podCheck{name: f.Name, problem: f.Reason}
			}
			return r.rollback(ctx, run, fmt.Sprintf("step %d/%d failed", step, steps), problems)
		}
		if i < steps-1 && pause > 0 {
			r.recordStep(ctx, run, step, int32(steps), int32(size), PhasePausing)
			select {
			case <-runCtx.Done():
				return 0
			case <-time.After(pause):
			}
		}
		r.recordStep(ctx, run, step, int32(steps), int32(size), PhaseChecking)
		var names []string
		for j, p := range eligible[:size] {
			if j < prev || res.Pods[j-prev].Outcome != notify.Skipped {
				names = append(names, p.Name)
			}
		}
		bad := r.checkPods(runCtx, df, names, hash)
		if stopped(ctx, runCtx) {
			return 0
		}
		if len(bad) > 0 {
			return r.rollback(ctx, run, fmt.Sprintf("step %d/%d failed its health check", step, steps), bad)
		}
		prev = size
	}
	return r.succeedSteps(ctx, run, int32(steps))
}

// stopped reports whether the rollout was superseded (newer content, silent, deleted) or the
// manager is stopping.
func stopped(ctx, runCtx context.Context) bool {
	return ctx.Err() != nil || errors.Is(context.Cause(runCtx), errSuperseded)
}

// plus adds a step's counts to the counts of the steps before it; the total stays the
// rollout's.
func plus(base, step notify.Progress) notify.Progress {
	base.Notified += step.Notified
	base.Failed += step.Failed
	base.Skipped += step.Skipped
	return base
}

func countNotifications(p notify.Progress) {
	for o, n := range map[string]int{"notified": p.Notified, "failed": p.Failed, "skipped": p.Skipped} {
		podNotificationsTotal.WithLabelValues(o).Add(float64(n))
	}
}

// recordStep writes the step and phase of a progressive rollout, with the counts so far.
func (r *Reconciler) recordStep(ctx context.Context, run *stepRun, step, steps, updated int32, phase string) {
	r.updateRunning(ctx, run.key, run.id, "step", func(next *decov1alpha1.RolloutStatus) {
		next.Step, next.Steps, next.Updated, next.Phase = step, steps, updated, phase
		setCounts(next, run.acc)
		next.Confirmed = run.led.counts()
	})
}

// succeedSteps records a progressive rollout every step of which passed, and keeps its content
// as the last good one before anything else can be stored.
func (r *Reconciler) succeedSteps(ctx context.Context, run *stepRun, steps int32) time.Duration {
	log := logf.FromContext(ctx)
	if err := r.saveLastGood(ctx, run.key, run.hash); err != nil {
		log.Info("could not keep the confirmed content for rollbacks", "error", err.Error())
	}
	rolloutsTotal.WithLabelValues("succeeded").Inc()
	finished := metav1.Now()
	duration := finished.Sub(run.startedAt.Time)
	rolloutDuration.Observe(duration.Seconds())
	if err := r.patchStatus(ctx, run.key, then(run.begin, func(d *decov1alpha1.Decofile) bool {
		setCondition(d, metav1.ConditionTrue, decov1alpha1.ReasonNotificationSucceeded, "Successfully notified all pods for "+run.id)
		d.Status.NotifiedHash = run.hash
		ro := summary(run.id, run.acc, &run.startedAt, &finished)
		ro.Step, ro.Steps, ro.Updated, ro.Phase = steps, steps, int32(run.acc.Notified), PhaseSucceeded
		ro.Confirmed = run.led.counts()
		d.Status.Rollout = ro
		recordHistory(d, ro, run.hash, ResultSucceeded, finished)
		return true
	})); err != nil {
		log.Info("could not record the rollout result; will retry", "error", err.Error())
		return r.opts.RetryBase
	}
	r.forget(run.key.String())
	r.recorder.Eventf(run.df, nil, corev1.EventTypeNormal, "RolloutSucceeded", "Notify",
		"Notified %d of %d pods for %s in %d steps in %s (%d skipped)", run.acc.Notified, run.acc.Total, run.id, steps, duration.Round(time.Millisecond), run.acc.Skipped)
	log.Info("progressive rollout succeeded", "notified", run.acc.Notified, "steps", steps, "duration", duration)
	return 0
}

// problemList names the first few pods with their problems, and how many more there are.
func problemList(problems []podCheck) string {
	const shown, maxReason = 3, 200
	var b strings.Builder
	for i, p := range problems[:min(shown, len(problems))] {
		if i > 0 {
			b.WriteString("; ")
		}
		reason := p.problem
		if len(reason) > maxReason {
			reason = reason[:maxReason] + "…"
		}
		fmt.Fprintf(&b, "%s: %s", p.name, reason)
	}
	if len(problems) > shown {
		fmt.Fprintf(&b, "; and %d more", len(problems)-shown)
	}
	return b.String()
}
