package controller_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// deliveryReconciles is how many reconciles the delivery controller has run in this process.
func deliveryReconciles() float64 {
	return float64(deliveryMetric("controller_runtime_reconcile_time_seconds").GetHistogram().GetSampleCount())
}

// deliveryMetric is the delivery controller's sample of one of controller-runtime's metrics in
// this process, or nil.
func deliveryMetric(name string) *dto.Metric {
	mfs, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return nil
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "decofile-delivery" {
					return m
				}
			}
		}
	}
	return nil
}

// requestCounter counts the requests a rest.Config's transport sends, by verb and resource, and
// the time they took (watches excluded).
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int
	total  int
	lat    map[string]time.Duration
}

func (c *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resource, collection := resourceOf(req.URL.Path)
		verb := req.Method
		switch {
		case req.URL.Query().Get("watch") == "true":
			verb = "WATCH"
		case verb == http.MethodGet && collection:
			verb = "LIST"
		}
		key := verb + " " + resource
		t0 := time.Now()
		resp, err := rt.RoundTrip(req)
		c.mu.Lock()
		c.counts[key]++
		c.total++
		if c.lat == nil {
			c.lat = map[string]time.Duration{}
		}
		if !strings.HasPrefix(key, "WATCH") {
			c.lat[key] += time.Since(t0)
		}
		c.mu.Unlock()
		return resp, err
	})
}

// snapshot is the total and the counts sorted by key.
func (c *requestCounter) snapshot() (int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	keys := make([]string, 0, len(c.counts))
	for k := range c.counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var sb strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&sb, "%s=%d(%s) ", k, c.counts[k], c.lat[k].Round(time.Millisecond))
	}
	return c.total, strings.TrimSpace(sb.String())
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// resourceOf is the resource (and subresource) of an API path: /api/v1/namespaces/n/configmaps/x
// gives configmaps, .../decofiles/x/status gives decofiles/status; collection is true for a path
// naming no object (a list).
func resourceOf(path string) (resource string, collection bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	if len(parts) > 0 && parts[0] == "apis" && len(parts) > 2 {
		parts = parts[3:]
	} else if len(parts) > 1 && parts[0] == "api" {
		parts = parts[2:]
	}
	if len(parts) >= 2 && parts[0] == "namespaces" {
		parts = parts[2:]
		if len(parts) == 0 {
			return "namespaces", false
		}
	}
	switch len(parts) {
	case 0:
		return "discovery", false
	case 1:
		return parts[0], true
	case 2:
		return parts[0], false
	default:
		return parts[0] + "/" + parts[2], false
	}
}

// readyWatch follows whether the Decofiles in namespaces named prefix-* are Ready, from a watch
// of the API server's table form: each change sends one row of printer columns, where polling a
// list would convert and send every Decofile each time, a cost on the cores the cold start
// shares.
type readyWatch struct {
	mu    sync.Mutex
	ready map[string]bool
	err   error
}

// watchReady starts a readyWatch that runs until ctx ends; a watch the API server closes is
// started again.
func watchReady(ctx context.Context, cfg *rest.Config, prefix string) (*readyWatch, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	w := &readyWatch{ready: map[string]bool{}}
	go func() {
		for ctx.Err() == nil {
			if err := w.follow(ctx, hc, cfg.Host, prefix); err != nil && ctx.Err() == nil {
				w.mu.Lock()
				w.err = err
				w.mu.Unlock()
				return
			}
		}
	}()
	return w, nil
}

// count is how many are Ready now, or the error that stopped the watch.
func (w *readyWatch) count() (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, r := range w.ready {
		if r {
			n++
		}
	}
	return n, w.err
}

// follow reads one watch until the API server ends it.
func (w *readyWatch) follow(ctx context.Context, hc *http.Client, host, prefix string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(host, "/")+"/apis/deco.sites/v1alpha1/decofiles?watch=true&includeObject=Metadata", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("watch Decofiles as a table: HTTP %d", resp.StatusCode)
	}
	dec := json.NewDecoder(resp.Body)
	col := -1 // the Ready column, named in the first event only
	for {
		var ev struct {
			Type   string       `json:"type"`
			Object metav1.Table `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("read the watch of Decofiles: %w", err)
		}
		if ev.Type == "ERROR" {
			return fmt.Errorf("watch of Decofiles ended with an error")
		}
		for i, cd := range ev.Object.ColumnDefinitions {
			if cd.Name == "Ready" {
				col = i
			}
		}
		for _, row := range ev.Object.Rows {
			var meta metav1.PartialObjectMetadata
			if err := json.Unmarshal(row.Object.Raw, &meta); err != nil {
				return err
			}
			if !strings.HasPrefix(meta.Namespace, prefix+"-") {
				continue
			}
			if col < 0 || col >= len(row.Cells) {
				return fmt.Errorf("no Ready column in the watch of Decofiles")
			}
			w.mu.Lock()
			w.ready[meta.Namespace+"/"+meta.Name] = ev.Type != "DELETED" && row.Cells[col] == string(corev1.ConditionTrue)
			w.mu.Unlock()
		}
	}
}

// rssBytes is this process's resident set size.
func rssBytes() int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// processCPU is the user and system CPU time a process (a /proc entry: "self" or a pid) has used.
func processCPU(proc string) time.Duration {
	raw, err := os.ReadFile("/proc/" + proc + "/stat")
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses and may hold spaces.
	_, rest, _ := strings.Cut(string(raw), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}

// childrenCPU is the CPU time used by this process's child processes: the local API server and
// its etcd.
func childrenCPU() time.Duration {
	var total time.Duration
	for _, d := range childrenCPUByName() {
		total += d
	}
	return total
}

// childrenCPUByName is the CPU time of this process's child processes by command name.
func childrenCPUByName() map[string]time.Duration {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := strconv.Itoa(os.Getpid())
	byName := map[string]time.Duration{}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		head, rest, _ := strings.Cut(string(raw), ") ")
		if f := strings.Fields(rest); len(f) > 1 && f[1] == self {
			_, name, _ := strings.Cut(head, "(")
			byName[name] += processCPU(e.Name())
		}
	}
	return byName
}
