package charts_test

import (
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	// The manager imports every part, whose metrics register with the controller-runtime
	// registry when their packages load.
	_ "github.com/siteops/siteops/internal/manager"
)

// metricPrefixes are the namespaces of the metrics the manager serves: ours and
// controller-runtime's. Every expression must use at least one such metric.
var metricPrefixes = []string{"deco_operator_", "siteops_", "controller_runtime_", "workqueue_", "leader_election_", "rest_client_", "certwatcher_"}

var identifier = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)

// referencedMetrics returns the metric names an expression uses.
func referencedMetrics(expr string) []string {
	// Drop quoted label values and legend templates so that only names remain.
	expr = regexp.MustCompile(`"[^"]*"|\{\{[^}]*\}\}`).ReplaceAllString(expr, `""`)
	var out []string
	for _, id := range identifier.FindAllString(expr, -1) {
		for _, p := range metricPrefixes {
			if strings.HasPrefix(id, p) {
				out = append(out, id)
				break
			}
		}
	}
	return out
}

// registered reports whether the manager's registry has a metric named name: registering a
// probe with the same name and another help text fails exactly when one exists.
func registered(name string) bool {
	probe := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "siteops chart test probe"})
	err := crmetrics.Registry.Register(probe)
	if err == nil {
		crmetrics.Registry.Unregister(probe)
		return false
	}
	var are prometheus.AlreadyRegisteredError
	return !errors.As(err, &are) || are.ExistingCollector != probe
}

// metricRegistered accepts the series a histogram or summary exposes.
func metricRegistered(name string) bool {
	if registered(name) {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && registered(base) {
			return true
		}
	}
	return false
}

func TestRegisteredProbe(t *testing.T) {
	if !registered("siteops_mirror_pushes_total") || !registered("controller_runtime_reconcile_total") {
		t.Fatal("the probe does not see metrics the code registers")
	}
	if registered("siteops_no_such_metric_total") || metricRegistered("siteops_no_such_metric_bucket") {
		t.Fatal("the probe sees a metric nobody registers")
	}
}

// dashboardExprs collects every PromQL expression of the Grafana dashboard.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartDir, "dashboards", "siteops.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d any
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if v["type"] == "datasource" {
				return // a data source picker, not PromQL
			}
			for k, e := range v {
				if s, ok := e.(string); ok && (k == "expr" || k == "query" || k == "definition") {
					exprs = append(exprs, s)
				}
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(d)
	return exprs
}

// alertExprs renders the PrometheusRule with every part on and returns its expressions by alert.
func alertExprs(t *testing.T) map[string]string {
	t.Helper()
	m := render(t, "siteops", namespace, values(t, valueSets["monitoring"]))
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct{ Alert, Expr string }
			}
		}
	}
	if !m.get(t, "PrometheusRule", "siteops", &rule) {
		t.Fatal("no PrometheusRule rendered")
	}
	out := map[string]string{}
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			out[r.Alert] = r.Expr
		}
	}
	return out
}

// TestDashboardAndAlertsUseRegisteredMetrics fails when the dashboard or an alert refers to a
// metric the code does not register (renamed or removed).
func TestDashboardAndAlertsUseRegisteredMetrics(t *testing.T) {
	exprs := dashboardExprs(t)
	if len(exprs) < 20 {
		t.Fatalf("dashboard has only %d expressions", len(exprs))
	}
	alerts := alertExprs(t)
	for _, want := range []string{"SiteopsDecofileRolloutFailures", "SiteopsValkeyACLErrors", "SiteopsMirrorPushFailures", "SiteopsMirrorAttributionAbsent"} {
		if alerts[want] == "" {
			t.Errorf("alert %s missing", want)
		}
	}
	for _, e := range alerts {
		exprs = append(exprs, e)
	}
	used := map[string]bool{}
	for _, e := range exprs {
		names := referencedMetrics(e)
		if len(names) == 0 {
			t.Errorf("expression %q uses no siteops or controller-runtime metric", e)
		}
		for _, n := range names {
			used[n] = true
		}
	}
	for _, n := range slices.Sorted(maps.Keys(used)) {
		if !metricRegistered(n) {
			t.Errorf("the dashboard or the alerts use %s, which siteops-manager does not register (renamed, removed, or its package is not linked into the manager)", n)
		}
	}
	// Every siteops metric appears on the dashboard, so a new metric is not forgotten.
	for _, n := range ourMetrics(t) {
		if !used[n] && !used[n+"_bucket"] {
			t.Errorf("metric %s is on no dashboard panel", n)
		}
	}
}

// ourMetrics lists the metric names declared in the code under internal/ (the Name of every
// prometheus.*Opts), each checked to be registered.
func ourMetrics(t *testing.T) []string {
	t.Helper()
	decl := regexp.MustCompile(`prometheus\.New(?:Counter|Gauge|Histogram|Summary)(?:Vec)?\(prometheus\.(?:Counter|Gauge|Histogram|Summary)Opts\{\s*Name:\s*"([^"]+)"`)
	var names []string
	err := filepath.WalkDir(filepath.Join("..", "internal"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllSubmatch(b, -1) {
			name := string(m[1])
			if !registered(name) {
				t.Errorf("%s declares metric %s, but siteops-manager does not register it (is the package linked into the manager?)", path, name)
			}
			names = append(names, name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 20 {
		t.Fatalf("found only %d metric declarations under internal/", len(names))
	}
	slices.Sort(names)
	return slices.Compact(names)
}
