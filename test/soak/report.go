package soak

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what a run did and found, written as report.json and printed as a table.
type Report struct {
	Seed     uint64        `json:"seed"`
	Duration time.Duration `json:"duration"`
	Tenants  int           `json:"tenants"`
	Load     Load          `json:"load"`
	// Faults are the faults injected, in order, with the recoveries they caused.
	Faults []FaultResult `json:"faults"`
	// Invariants are the checks made while the run went and at its end.
	Invariants []Invariant `json:"invariants"`
	// Manager is the leader's memory and goroutines at the reference point and at the end.
	Manager []ManagerSample `json:"manager"`
}

// Load counts what was sent.
type Load struct {
	Pushes        int   `json:"pushes"`
	PushesRefused int   `json:"pushesRefused"`
	MirrorEdits   int64 `json:"mirrorEdits"`
	MirrorRefused int64 `json:"mirrorRefused"`
	CacheRounds   int64 `json:"cacheRounds"`
	CacheFailed   int64 `json:"cacheFailed"`
	// CacheLockoutMax is the longest time a tenant's probe could not use its own keys.
	CacheLockoutMax time.Duration `json:"cacheLockoutMax"`
}

// FaultResult is one injected fault and how long each recovery it is measured by took.
type FaultResult struct {
	Fault Fault         `json:"fault"`
	At    time.Duration `json:"at"`
	// Recovery names what recovered (for example "next rollout") and how long after the fault
	// ended it did; a missing entry did not recover in time.
	Recovery map[string]time.Duration `json:"recovery"`
	Error    string                   `json:"error,omitempty"`
	// Canary is the tenant the next rollout after the fault was measured on.
	Canary string `json:"canary,omitempty"`
}

// Invariant is one property of the run and whether it held.
type Invariant struct {
	Name   string `json:"name"`
	Held   bool   `json:"held"`
	Detail string `json:"detail,omitempty"`
}

// ManagerSample is the leader manager's memory and goroutines at one moment of the run.
type ManagerSample struct {
	At  time.Duration `json:"at"`
	Pod string        `json:"pod"`
	// Leading is how long the pod had held the Lease when it was sampled.
	Leading time.Duration `json:"leading"`
	// LiveHeapBytes is the heap the last GC found live (go_gc_heap_live_bytes): what the
	// manager keeps, whatever garbage is waiting for the next cycle.
	LiveHeapBytes float64 `json:"liveHeapBytes"`
	// HeapBytes is the heap in use at that moment, garbage included (go_memstats_heap_inuse_bytes).
	HeapBytes  float64 `json:"heapBytes"`
	Goroutines float64 `json:"goroutines"`
	// HeapProfile is the file, next to report.json, holding the pod's heap profile at that
	// moment (read it with `go tool pprof -sample_index=inuse_space <file>`).
	HeapProfile string `json:"heapProfile,omitempty"`
	// heapProfile is the profile itself, written out by Report.Write.
	heapProfile []byte
}

// Failed lists the invariants that did not hold.
func (r *Report) Failed() []Invariant {
	var out []Invariant
	for _, i := range r.Invariants {
		if !i.Held {
			out = append(out, i)
		}
	}
	return out
}

// Write saves the report as dir/report.json, with the leader's heap profiles beside it.
func (r *Report) Write(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("create the report folder: %w", err)
	}
	for i := range r.Manager {
		m := &r.Manager[i]
		if len(m.heapProfile) == 0 {
			continue
		}
		m.HeapProfile = fmt.Sprintf("heap-%d.pprof", i)
		if err := os.WriteFile(filepath.Join(dir, m.HeapProfile), m.heapProfile, 0o644); err != nil {
			return "", fmt.Errorf("write a heap profile: %w", err)
		}
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "report.json")
	return path, os.WriteFile(path, b, 0o644)
}

// Table writes the report for people: the load, each fault with its recoveries, each invariant.
func (r *Report) Table(w io.Writer) {
	fmt.Fprintf(w, "soak: seed %d, %s, %d tenants\n", r.Seed, r.Duration, r.Tenants)
	l := r.Load
	fmt.Fprintf(w, "load: %d pushes (%d refused), %d mirror edits (%d refused), %d cache rounds (%d failed, longest lock-out %s)\n",
		l.Pushes, l.PushesRefused, l.MirrorEdits, l.MirrorRefused, l.CacheRounds, l.CacheFailed, l.CacheLockoutMax.Round(time.Millisecond))
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "at\tfault\trecovery")
	for _, f := range r.Faults {
		var parts []string
		for _, name := range slices.Sorted(maps.Keys(f.Recovery)) {
			parts = append(parts, fmt.Sprintf("%s %s", name, f.Recovery[name].Round(100*time.Millisecond)))
		}
		if f.Error != "" {
			parts = append(parts, "error: "+f.Error)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", f.At.Round(time.Second), f.Fault, strings.Join(parts, ", "))
	}
	fmt.Fprintln(tw, "\ninvariant\theld\tdetail")
	for _, i := range r.Invariants {
		fmt.Fprintf(tw, "%s\t%v\t%s\n", i.Name, i.Held, i.Detail)
	}
	_ = tw.Flush()
	for _, m := range r.Manager {
		fmt.Fprintf(w, "manager %s at %s, leading for %s: live heap %.1f MiB (in use %.1f MiB), %.0f goroutines\n", m.Pod, m.At.Round(time.Second),
			m.Leading.Round(time.Second), m.LiveHeapBytes/(1<<20), m.HeapBytes/(1<<20), m.Goroutines)
		if m.HeapProfile != "" {
			fmt.Fprintf(w, "  heap profile: %s\n", m.HeapProfile)
		}
	}
}
