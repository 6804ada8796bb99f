package charts_test

import (
	"strings"
	"testing"
)

// TestGoMemLimitFollowsTheMemoryLimit: the manager's GOMEMLIMIT is 90% of
// resources.limits.memory in bytes (the manager derives its delivery budgets from it), absent
// without a limit, and a limit the chart cannot read fails the install with a message.
func TestGoMemLimitFollowsTheMemoryLimit(t *testing.T) {
	for doc, want := range map[string]string{
		"":                                   "483183820", // the default 512Mi
		"resources: {limits: {memory: 1Gi}}": "966367641",
		"resources: {limits: {memory: 536870912}}": "483183820",
		"resources: {limits: {memory: 600M}}":      "540000000",
		"resources: {limits: null}":                "",
	} {
		env := map[string]string{}
		for _, e := range render(t, "siteops", namespace, values(t, doc)).deployment(t).Spec.Template.Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		if got := env["GOMEMLIMIT"]; got != want {
			t.Errorf("%q: GOMEMLIMIT %q, want %q", doc, got, want)
		}
	}
	_, err := newInstall("siteops", namespace).Run(loadChart(t), values(t, "resources: {limits: {memory: 1.5Gi}}"))
	if err == nil || !strings.Contains(err.Error(), "GOMEMLIMIT") {
		t.Fatalf("a fractional limit: want a failure naming GOMEMLIMIT, got %v", err)
	}
}
