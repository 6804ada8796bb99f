// Package plan turns a Decofile's spec.rollout.steps into how many pods hold the new content
// after each step of a progressive rollout. It is pure: no clock, no cluster.
package plan

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// Validate checks steps the way the CRD's rules do, for Decofiles stored before those rules or
// written past them: each a pod count of at least 1 or a percentage from 1% to 100%, counts
// before percentages, each kind strictly increasing.
func Validate(steps []intstr.IntOrString) error {
	if len(steps) == 0 {
		return errors.New("spec.rollout.steps is empty")
	}
	lastCount, lastPercent := 0, 0
	for i, s := range steps {
		count, percent, err := parse(s)
		if err != nil {
			return fmt.Errorf("spec.rollout.steps[%d]: %w", i, err)
		}
		switch {
		case count > 0 && lastPercent > 0:
			return fmt.Errorf("spec.rollout.steps[%d]: pod count %d comes after a percentage; counts must come first", i, count)
		case count > 0 && count <= lastCount:
			return fmt.Errorf("spec.rollout.steps[%d]: %d does not increase on %d", i, count, lastCount)
		case percent > 0 && percent <= lastPercent:
			return fmt.Errorf("spec.rollout.steps[%d]: %d%% does not increase on %d%%", i, percent, lastPercent)
		}
		if count > 0 {
			lastCount = count
		} else {
			lastPercent = percent
		}
	}
	return nil
}

// parse reads one step: a count (> 0) or a percentage (1..100).
func parse(s intstr.IntOrString) (count, percent int, err error) {
	if s.Type == intstr.Int {
		if s.IntVal < 1 {
			return 0, 0, fmt.Errorf("pod count %d is below 1", s.IntVal)
		}
		return int(s.IntVal), 0, nil
	}
	v, ok := strings.CutSuffix(s.StrVal, "%")
	p, perr := strconv.Atoi(v)
	if !ok || perr != nil || v == "" || v[0] == '+' || v[0] == '-' {
		return 0, 0, fmt.Errorf("%q is neither a pod count nor a percentage like \"10%%\"", s.StrVal)
	}
	if p < 1 || p > 100 {
		return 0, 0, fmt.Errorf("%d%% is not between 1%% and 100%%", p)
	}
	return 0, p, nil
}

// Sizes is how many of n pods hold the new content after each step: a count is capped at n, a
// percentage is rounded up and is at least one pod. A step that would add no pod is dropped, and
// a last step short of n is followed by one for all n, so the rollout always ends on every pod.
// Zero pods make an empty plan.
func Sizes(steps []intstr.IntOrString, n int) ([]int, error) {
	if err := Validate(steps); err != nil {
		return nil, err
	}
	var sizes []int
	for _, s := range steps {
		count, percent, _ := parse(s)
		size := min(count, n)
		if percent > 0 {
			size = max(1, (percent*n+99)/100)
		}
		size = min(size, n)
		if size > 0 && (len(sizes) == 0 || size > sizes[len(sizes)-1]) {
			sizes = append(sizes, size)
		}
	}
	if n > 0 && (len(sizes) == 0 || sizes[len(sizes)-1] < n) {
		sizes = append(sizes, n)
	}
	return sizes, nil
}
