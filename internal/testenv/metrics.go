package testenv

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
)

// Metric reads the API server's /metrics and sums the samples of name whose labels include every
// pair in want; it also returns those samples, one line each in the text format.
func (c *Cluster) Metric(t testing.TB, name string, want map[string]string) (float64, []string) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	b, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").SetHeader("Accept", "text/plain").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("read the API server's metrics: %v", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("parse the API server's metrics: %v", err)
	}
	match := labels.SelectorFromSet(want)
	sum := 0.0
	var lines []string
	for _, m := range families[name].GetMetric() {
		have := labels.Set{}
		var pairs []string
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
			pairs = append(pairs, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
		}
		if !match.Matches(have) {
			continue
		}
		// One of these is set, as the family's type says.
		v := m.GetGauge().GetValue() + m.GetCounter().GetValue() + m.GetUntyped().GetValue()
		sum += v
		lines = append(lines, fmt.Sprintf("%s{%s} %g", name, strings.Join(pairs, ","), v))
	}
	return sum, lines
}

// Watches is the number of watches of resource (plural, e.g. "configmaps") the API server holds
// open now, from its apiserver_longrunning_requests metric.
func (c *Cluster) Watches(t testing.TB, resource string) int {
	t.Helper()
	n, _ := c.Metric(t, "apiserver_longrunning_requests", map[string]string{"verb": "WATCH", "resource": resource})
	return int(n)
}
