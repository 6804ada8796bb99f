package testenv

import (
	"bufio"
	"bytes"
	"context"
	"strconv"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
)

// Watches is the number of watches of resource (plural, e.g. "configmaps") the API server holds
// open now, from its apiserver_longrunning_requests metric.
func (c *Cluster) Watches(t testing.TB, resource string) int {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	b, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").SetHeader("Accept", "text/plain").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("read the API server's metrics: %v", err)
	}
	n := 0
	s := bufio.NewScanner(bytes.NewReader(b))
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		if !strings.HasPrefix(line, "apiserver_longrunning_requests{") || !strings.Contains(line, `verb="WATCH"`) || !strings.Contains(line, `resource="`+resource+`"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("read %q: %v", line, err)
		}
		n += int(v)
	}
	return n
}
