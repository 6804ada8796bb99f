package testenv

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
)

// Metric reads the API server's /metrics and sums the samples of name whose labels contain each
// of labels (written `key="value"`); it also returns the lines it summed.
func (c *Cluster) Metric(t testing.TB, name string, labels ...string) (float64, []string) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	b, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").SetHeader("Accept", "text/plain").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("read the API server's metrics: %v", err)
	}
	sum := 0.0
	var lines []string
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest == "" || rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		if !containsAll(rest, labels) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("read %q: %v", line, err)
		}
		sum += v
		lines = append(lines, line)
	}
	return sum, lines
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// Watches is the number of watches of resource (plural, e.g. "configmaps") the API server holds
// open now, from its apiserver_longrunning_requests metric.
func (c *Cluster) Watches(t testing.TB, resource string) int {
	t.Helper()
	n, _ := c.Metric(t, "apiserver_longrunning_requests", `verb="WATCH"`, `resource="`+resource+`"`)
	return int(n)
}
