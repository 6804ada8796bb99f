// Package follow waits, without races, until a Decofile's pods confirmed a given content version:
// it reads the Decofile, decides from its PodsNotified condition, and otherwise watches from
// exactly the resourceVersion it read, so no update between the read and the watch is missed.
package follow

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	decov1alpha1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// Current asks for the version stored when the wait starts (the first one seen with content).
const Current = "current"

// Outcome of a wait.
type Outcome int

// Outcomes.
const (
	// Pending: the awaited version is not confirmed or failed yet.
	Pending Outcome = iota
	// Succeeded: PodsNotified=True for the awaited version.
	Succeeded
	// Failed: PodsNotified=False for the awaited version, or the Decofile is silent.
	Failed
)

// Verdict is what one observation of the Decofile says about the awaited version.
type Verdict struct {
	Outcome Outcome
	// ID is the awaited version (resolved when Current was asked for; empty until content exists).
	ID string
	// Message explains the verdict in one line.
	Message string
	// Rollout is the progress of the awaited version, when the Decofile reports it.
	Rollout *decov1alpha1.RolloutStatus
}

// MinCommitPrefix is the fewest hex characters a commit prefix may have (git's default
// abbreviation, the length of the Decofile's Commit column).
const MinCommitPrefix = 7

// fullCommitLengths are the lengths of SHA-1 and SHA-256 commit names.
var fullCommitLengths = []int{40, 64}

// ValidTarget checks a --for value: current, commit:<sha or prefix of at least 7 hex characters>
// or timestamp:<ts>.
func ValidTarget(want string) error {
	if sha, ok := strings.CutPrefix(want, "commit:"); ok && isHex(sha) && len(sha) < MinCommitPrefix {
		return fmt.Errorf("--for %q: a commit prefix needs at least %d hex characters", want, MinCommitPrefix)
	}
	if want == Current || strings.HasPrefix(want, "commit:") && len(want) > len("commit:") ||
		strings.HasPrefix(want, "timestamp:") && len(want) > len("timestamp:") {
		return nil
	}
	return fmt.Errorf("--for %q: want current, commit:<sha> or timestamp:<unix seconds>", want)
}

func isHex(s string) bool {
	return s != "" && strings.Trim(s, "0123456789abcdefABCDEF") == ""
}

// commitPrefix returns the lower-case prefix when want names a commit by a prefix (hex, at least
// MinCommitPrefix characters, shorter than a full commit name).
func commitPrefix(want string) (string, bool) {
	sha, ok := strings.CutPrefix(want, "commit:")
	if !ok || !isHex(sha) || len(sha) < MinCommitPrefix || slices.Contains(fullCommitLengths, len(sha)) {
		return "", false
	}
	return strings.ToLower(sha), true
}

// resolvePrefix finds the one commit the Decofile knows of (the stored one and the one of its
// latest rollout) that starts with prefix: "" when none does, an error when two different do.
func resolvePrefix(df *decov1alpha1.Decofile, prefix string) (string, error) {
	var candidates []string
	if rev := df.Status.Revision(); rev != "" {
		candidates = append(candidates, rev)
	}
	if ro := df.Status.Rollout; ro != nil {
		if c, ok := strings.CutPrefix(ro.ID, "commit:"); ok {
			candidates = append(candidates, c)
		}
	}
	found := ""
	for _, c := range candidates {
		if !strings.HasPrefix(strings.ToLower(c), prefix) || c == found {
			continue
		}
		if found != "" {
			return "", fmt.Errorf("commit prefix %s is ambiguous: it matches %s and %s; give more characters", prefix, found, c)
		}
		found = c
	}
	return found, nil
}

// Evaluate decides from one observation. want is an ID (commit:… or timestamp:…), a commit
// prefix (commit:<7 or more hex characters>) or Current; the verdict's ID is the full ID.
func Evaluate(df *decov1alpha1.Decofile, want string) Verdict {
	if want == Current {
		if df.Status.ContentHash == "" {
			return Verdict{Message: "no content stored yet"}
		}
		want = decov1alpha1.RolloutID(&df.Status)
	}
	if prefix, ok := commitPrefix(want); ok {
		full, err := resolvePrefix(df, prefix)
		switch {
		case err != nil:
			return Verdict{Outcome: Failed, ID: want, Message: err.Error()}
		case full == "":
			v := Verdict{ID: want, Message: fmt.Sprintf("waiting for the rollout of a commit starting with %s to start", prefix)}
			if df.Status.ContentHash != "" {
				v.Message += fmt.Sprintf(" (stored content is %s)", decov1alpha1.RolloutID(&df.Status))
			}
			return v
		}
		want = "commit:" + full
	}
	v := Verdict{ID: want}
	if df.Spec.Suspend {
		v.Outcome, v.Message = Failed, "the Decofile is suspended (spec.suspend: true): nothing is delivered until it is resumed (siteops resume decofile/"+df.Name+")"
		return v
	}
	if df.Spec.Silent {
		v.Outcome, v.Message = Failed, "the Decofile is silent (spec.silent: true): pods are not notified, so no rollout can be confirmed"
		return v
	}
	cond := meta.FindStatusCondition(df.Status.Conditions, decov1alpha1.ConditionPodsNotified)
	ro := df.Status.Rollout
	about := ro != nil && ro.ID == want
	if about {
		v.Rollout = ro
	}
	mentioned := cond != nil && (about || strings.HasSuffix(cond.Message, " "+want) || strings.Contains(cond.Message, " "+want+": "))
	if !mentioned {
		v.Message = fmt.Sprintf("waiting for the rollout of %s to start", want)
		if cur := decov1alpha1.RolloutID(&df.Status); df.Status.ContentHash != "" && cur != want {
			v.Message += fmt.Sprintf(" (stored content is %s)", cur)
		}
		return v
	}
	switch cond.Status {
	case metav1.ConditionTrue:
		v.Outcome = Succeeded
	case metav1.ConditionFalse:
		v.Outcome = Failed
	}
	v.Message = cond.Message
	return v
}

// Wait observes the Decofile until the verdict for want is Succeeded or Failed, or ctx ends
// (then it returns the last verdict and ctx's error). onUpdate, when set, sees every verdict.
func Wait(ctx context.Context, c client.WithWatch, key client.ObjectKey, want string, onUpdate func(Verdict)) (Verdict, error) {
	if err := ValidTarget(want); err != nil {
		return Verdict{}, err
	}
	last := Verdict{ID: want, Message: "not read yet"}
	observe := func(df *decov1alpha1.Decofile) bool {
		v := Evaluate(df, want)
		if v.ID != "" && v.ID != want && v.Outcome != Failed {
			// Pin "current" or a commit prefix to the first version it resolved to, so a later
			// change is not mistaken for it.
			want = v.ID
		}
		last = v
		if onUpdate != nil {
			onUpdate(v)
		}
		return v.Outcome != Pending
	}
	for {
		var df decov1alpha1.Decofile
		if err := c.Get(ctx, key, &df); err != nil {
			if ctx.Err() != nil {
				return last, ctx.Err()
			}
			if apierrors.IsNotFound(err) {
				return last, fmt.Errorf("decofile %s not found", key)
			}
			return last, fmt.Errorf("read Decofile %s: %w", key, err)
		}
		if observe(&df) {
			return last, nil
		}
		done, err := watchFrom(ctx, c, key, df.ResourceVersion, observe)
		if done || err != nil {
			return last, err
		}
		if ctx.Err() != nil {
			return last, ctx.Err()
		}
		// The watch ended (server timeout or expired resourceVersion): read again, watch again.
	}
}

// watchFrom watches the Decofile from rv and feeds each version to observe. It reports done when
// observe did, and returns (false, nil) when the watch ended and the caller should re-read.
func watchFrom(ctx context.Context, c client.WithWatch, key client.ObjectKey, rv string, observe func(*decov1alpha1.Decofile) bool) (bool, error) {
	w, err := c.Watch(ctx, &decov1alpha1.DecofileList{}, client.InNamespace(key.Namespace),
		&client.ListOptions{Raw: &metav1.ListOptions{
			ResourceVersion: rv, FieldSelector: "metadata.name=" + key.Name, AllowWatchBookmarks: true,
		}})
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, fmt.Errorf("watch Decofile %s: %w", key, err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case ev, ok := <-w.ResultChan():
			if !ok {
				return false, nil
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				if df, ok := ev.Object.(*decov1alpha1.Decofile); ok && observe(df) {
					return true, nil
				}
			case watch.Deleted:
				return false, fmt.Errorf("decofile %s was deleted while waiting", key)
			case watch.Error:
				status := apierrors.FromObject(ev.Object)
				var se apierrors.APIStatus
				if errors.As(status, &se) && (se.Status().Code == http.StatusGone || se.Status().Code == http.StatusRequestTimeout) {
					return false, nil // expired: re-read and watch from the new version
				}
				return false, fmt.Errorf("watch Decofile %s: %w", key, status)
			}
		}
	}
}
