package inspect

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StatusSelector keeps the summaries whose conditions have the wanted statuses, as Flux's
// --status-selector does: "ready=false" keeps objects whose Ready condition is False.
type StatusSelector map[string]metav1.ConditionStatus

// ParseStatusSelector reads "type=status[,type=status…]"; condition types and statuses match
// without regard to case. An empty string selects everything.
func ParseStatusSelector(s string) (StatusSelector, error) {
	sel := StatusSelector{}
	if strings.TrimSpace(s) == "" {
		return sel, nil
	}
	for _, part := range strings.Split(s, ",") {
		typ, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		typ, val = strings.TrimSpace(typ), strings.TrimSpace(val)
		if !ok || typ == "" {
			return nil, fmt.Errorf("status selector %q: want type=status, such as ready=false", part)
		}
		var cs metav1.ConditionStatus
		switch strings.ToLower(val) {
		case "true":
			cs = metav1.ConditionTrue
		case "false":
			cs = metav1.ConditionFalse
		case "unknown":
			cs = metav1.ConditionUnknown
		default:
			return nil, fmt.Errorf("status selector %q: status must be true, false or unknown", part)
		}
		sel[strings.ToLower(typ)] = cs
	}
	return sel, nil
}

// Matches reports whether s has every selected condition with the selected status.
func (sel StatusSelector) Matches(s Summary) bool {
	for typ, want := range sel {
		found := false
		for t, have := range s.Conditions {
			if strings.EqualFold(t, typ) {
				found = have == want
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Filter returns the summaries sel matches, in order.
func (sel StatusSelector) Filter(ss []Summary) []Summary {
	if len(sel) == 0 {
		return ss
	}
	out := ss[:0:0]
	for _, s := range ss {
		if sel.Matches(s) {
			out = append(out, s)
		}
	}
	return out
}
