package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"testing"

	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/encode/sample"
	"github.com/siteops/siteops/internal/decofile/source"
	"github.com/siteops/siteops/internal/decofile/sources"
	"github.com/siteops/siteops/internal/testenv/peakmem"
)

// benchDelivery is one Decofile of BenchmarkDeliveryMemory: its namespace and how its blocks
// are retrieved (read from a folder, as a git checkout is, or taken from inline values).
type benchDelivery struct {
	ns     string
	remote bool
	fetch  func() (source.Blocks, error)
}

// BenchmarkDeliveryMemory runs the delivery pipeline (retrieval, admission to the memory
// budget, merge, hash, encode) on the worst inputs at the limits, with the default workers
// (8) and retrievals (4), and GOMEMLIMIT as the chart sets it (90% of 512 MiB), from which the
// memory budget and content limit follow. It reports the peak RSS (VmHWM) and peak heap of the
// process; the goal is a peak RSS under 400 MiB, the chart's 512 MiB limit with margin:
//
//   - members-64MiB: 64 MiB of JSON of millions of tiny members, with the content limit raised
//     to 64 MiB (refused by --decofile-max-members before anything is decoded);
//   - content-limit: content at the derived content limit (realistic, compressible JSON);
//   - inline-10x1.2MB: ten inline Decofiles of 1.2 MB created at once (each compressed);
//   - deep: objects nested 10 000 deep (the depth bound) with unsorted keys, filled to the
//     content limit.
func BenchmarkDeliveryMemory(b *testing.B) {
	prev := debug.SetMemoryLimit(AssumedMemoryLimit)
	defer debug.SetMemoryLimit(prev)
	memBytes := DeliveryMemory(GoMemoryLimit())
	limit := ContentLimit(memBytes)
	b.Logf("GOMEMLIMIT %d MiB: delivery memory %d MiB, content limit %.1f MiB", GoMemoryLimit()>>20, memBytes>>20, float64(limit)/(1<<20))

	dir := b.TempDir()
	folder := func(name string, files map[string][]byte) string {
		p := filepath.Join(dir, name)
		for n, v := range files {
			if err := os.MkdirAll(filepath.Join(p, "blocks"), 0o755); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(p, "blocks", n), v, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		return p
	}
	remote := func(ns, p string, contentLimit int64) benchDelivery {
		return benchDelivery{ns: ns, remote: true, fetch: func() (source.Blocks, error) {
			return source.ExtractFS(os.DirFS(p), "blocks", source.Limits{DecompressedBytes: contentLimit})
		}}
	}

	// The inputs of remote sources are on disk only, so the heap holds none of them at the start.
	members := folder("members", map[string][]byte{"flat.json": tinyMembers(64<<20 - 64)})
	content := folder("content", sample.Generate(sample.Options{Seed: 7, Blocks: 800, TargetBytes: int(limit) - 1<<20}))
	deep := folder("deep", map[string][]byte{"deep.json": deepObjects(encode.DefaultDepth, int(limit)-1<<20)})
	var inline []benchDelivery
	for i := range 10 {
		files := sample.Generate(sample.Options{Seed: uint64(100 + i), Blocks: 40, TargetBytes: 1_200_000})
		values := map[string]json.RawMessage{}
		for n, v := range files {
			values[n] = v
		}
		inline = append(inline, benchDelivery{ns: fmt.Sprintf("tenant-%d", i%3), fetch: func() (source.Blocks, error) { return source.Inline(values) }})
	}

	for _, c := range []struct {
		name         string
		contentLimit int64
		deliveries   []benchDelivery
	}{
		{"members-64MiB", 64 << 20, []benchDelivery{remote("a", members, 64<<20)}},
		{"content-limit", limit, []benchDelivery{remote("a", content, limit)}},
		{"inline-10x1.2MB", limit, inline},
		{"deep", limit, []benchDelivery{remote("a", deep, limit)}},
	} {
		b.Run(c.name, func(b *testing.B) {
			r := benchReconciler(memBytes, c.contentLimit)
			var peak peakmem.Peak
			var outcomes []string
			for b.Loop() {
				s := peakmem.Start()
				outcomes = r.deliverAll(c.deliveries)
				peak = s.Stop()
			}
			b.ReportMetric(peakmem.MiB(peak.RSS), "peak-rss-MiB")
			b.ReportMetric(peakmem.MiB(peak.Heap), "peak-heap-MiB")
			b.ReportMetric(peakmem.MiB(peak.HeapGrowth()), "heap-growth-MiB")
			fmt.Fprintf(b.Output(), "%s: peak RSS %.0f MiB, peak heap %.0f MiB (+%.0f); %s\n", c.name, peakmem.MiB(peak.RSS), peakmem.MiB(peak.Heap), peakmem.MiB(peak.HeapGrowth()), summarize(outcomes))
		})
	}
}

// benchReconciler is a Reconciler with the default workers and retrievals and memBytes of
// delivery memory, without an API server: deliverAll runs what deliver does up to the write.
func benchReconciler(memBytes, contentLimit int64) *Reconciler {
	return &Reconciler{
		opts:       Options{GitHub: &source.GitHub{Limits: source.Limits{DecompressedBytes: contentLimit}}, MaxConcurrentReconciles: DefaultMaxConcurrentReconciles},
		retrievals: make(chan struct{}, DefaultMaxConcurrentRetrievals),
		memory:     newMemory(memBytes),
		sources:    sources.Describing,
	}
}

// deliverAll delivers ds at once on DefaultMaxConcurrentReconciles workers and returns each
// one's outcome: the stored key and size, or the failure.
func (r *Reconciler) deliverAll(ds []benchDelivery) []string {
	ctx := context.Background()
	workers := make(chan struct{}, r.opts.MaxConcurrentReconciles)
	out := make([]string, len(ds))
	var wg sync.WaitGroup
	for i, d := range ds {
		wg.Go(func() {
			workers <- struct{}{}
			defer func() { <-workers }()
			res, err := r.benchDeliver(ctx, d)
			if err != nil {
				out[i] = fmt.Sprintf("%s: %v", source.AsError(err).Reason, err)
				return
			}
			out[i] = fmt.Sprintf("stored %s, %d bytes from %d", res.Key, res.StoredBytes(), res.RawBytes)
		})
	}
	wg.Wait()
	return out
}

// benchDeliver is deliverConfigMap and store without the API server: the same retrieval slot,
// admission, bounds and encode options.
func (r *Reconciler) benchDeliver(ctx context.Context, d benchDelivery) (*encode.Result, error) {
	if d.remote {
		r.retrievals <- struct{}{}
		defer func() { <-r.retrievals }()
	}
	blocks, err := d.fetch()
	if err != nil {
		return nil, err
	}
	release, err := r.admit(ctx, d.ns, blocks)
	if err != nil {
		return nil, err
	}
	defer release()
	merged, err := encode.MergeWithin(blocks, r.bounds())
	if err != nil {
		return nil, tooLarge(err)
	}
	_ = encode.Hash(merged)
	res, err := encode.Encode(merged, r.encodeOptions(ctx, d.ns))
	var tl *encode.TooLargeError
	if errors.As(err, &tl) {
		return nil, &source.Error{Reason: "TooLarge", Err: err}
	}
	return res, err
}

func summarize(outcomes []string) string {
	count := map[string]int{}
	var order []string
	for _, o := range outcomes {
		key := o
		if len(key) > 160 {
			key = key[:160] + "…"
		}
		if count[key] == 0 {
			order = append(order, key)
		}
		count[key]++
	}
	var parts []string
	for _, k := range order {
		parts = append(parts, fmt.Sprintf("%d× %s", count[k], k))
	}
	return strings.Join(parts, "; ")
}

// tinyMembers is an object of about size bytes whose members are as small as they can be with
// distinct keys ("a123456":1), in reverse key order, so every one of them is sorted.
func tinyMembers(size int) []byte {
	var sb strings.Builder
	sb.Grow(size + 32)
	sb.WriteByte('{')
	for i := 9_999_999; sb.Len() < size-16; i-- {
		if i != 9_999_999 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `"%07d":%d`, i, i%10)
	}
	sb.WriteByte('}')
	return []byte(sb.String())
}

// deepObjects nests depth objects, each with its keys out of order ({"b":0,"a":…}), around a
// string that fills the value to about size bytes.
func deepObjects(depth, size int) []byte {
	var sb strings.Builder
	sb.Grow(size + 32)
	for range depth {
		sb.WriteString(`{"b":0,"a":`)
	}
	sb.WriteByte('"')
	sb.WriteString(strings.Repeat("deco ", max(0, size-sb.Len()-depth-2)/5))
	sb.WriteByte('"')
	sb.WriteString(strings.Repeat("}", depth))
	return []byte(sb.String())
}
