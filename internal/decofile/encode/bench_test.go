package encode

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/siteops/siteops/internal/decofile/encode/sample"
)

func standardMerged(tb testing.TB) []byte {
	tb.Helper()
	files := sample.Generate(sample.Standard)
	blocks := make(map[string]json.RawMessage, len(files))
	for n, b := range files {
		blocks[strings.TrimSuffix(n, ".json")] = b
	}
	merged, err := Merge(blocks)
	if err != nil {
		tb.Fatal(err)
	}
	return merged
}

// BenchmarkLevels measures every brotli level on the standard sample; it is how DefaultLevels
// was chosen. Reported: stored bytes (base64) and the ratio to the raw JSON.
func BenchmarkLevels(b *testing.B) {
	merged := standardMerged(b)
	for _, lvl := range []Level{{4, 22}, {5, 22}, {6, 22}, {7, 22}, {8, 22}, {9, 22}, {9, 24}, {10, 22}, {11, 22}, {11, 24}} {
		b.Run(lvl.String(), func(b *testing.B) {
			b.SetBytes(int64(len(merged)))
			var out string
			cpu0 := cpuTime()
			for b.Loop() {
				var err error
				if out, err = Compress(merged, lvl); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
			b.ReportMetric(float64(len(out)), "stored-bytes")
			b.ReportMetric(float64(len(out))/float64(len(merged))*100, "%-of-raw")
		})
	}
}

// BenchmarkDefaultLevel reports the two figures the first level of the ladder is chosen by, on
// the standard sample: its stored size as a ratio of the quality-11/window-24 size (goal ≤ 1.2)
// and the CPU seconds one Encode takes (goal ≤ 0.5 s). Candidates next to it are measured too.
func BenchmarkDefaultLevel(b *testing.B) {
	merged := standardMerged(b)
	best, err := Compress(merged, Level{Quality: 11, LGWin: 24})
	if err != nil {
		b.Fatal(err)
	}
	for _, lvl := range []Level{DefaultLevels[0], {8, 22}, {8, 24}, {9, 24}, {10, 22}} {
		b.Run(lvl.String(), func(b *testing.B) {
			var out string
			cpu0 := cpuTime()
			for b.Loop() {
				if out, err = Compress(merged, lvl); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(out))/float64(len(best)), "ratio-vs-q11")
			b.ReportMetric((cpuTime()-cpu0).Seconds()/float64(b.N), "cpu-s/op")
			b.ReportMetric(float64(len(out)), "stored-bytes")
		})
	}
}

// BenchmarkMerge measures canonicalising and merging the 360 blocks.
func BenchmarkMerge(b *testing.B) {
	files := sample.Generate(sample.Standard)
	blocks := make(map[string]json.RawMessage, len(files))
	for n, v := range files {
		blocks[strings.TrimSuffix(n, ".json")] = v
	}
	var total int
	for _, v := range files {
		total += len(v)
	}
	b.SetBytes(int64(total))
	cpu0 := cpuTime()
	for b.Loop() {
		if _, err := Merge(blocks); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
}

// BenchmarkEncode measures Encode with the default ladder on the standard sample.
func BenchmarkEncode(b *testing.B) {
	merged := standardMerged(b)
	b.SetBytes(int64(len(merged)))
	var r *Result
	cpu0 := cpuTime()
	for b.Loop() {
		var err error
		if r, err = Encode(merged, Options{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
	b.ReportMetric(float64(len(merged)), "raw-bytes")
	b.ReportMetric(float64(r.StoredBytes()), "stored-bytes")
	b.ReportMetric(float64(r.Level.Quality), "quality")
	fmt.Fprintf(b.Output(), "encode: %d → %d bytes (%s, %d attempt(s))\n", len(merged), r.StoredBytes(), r.Level, r.Attempts)
}

// cpuTime is the user+system CPU time of the process so far: benchmarks report it per operation
// because wall time depends on how busy the machine is.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkTooLargeIncompressible: 5 MiB that no level compresses. "bounded" is Encode, refused
// by the quick probe; "ladder" is every level of DefaultLevels, what Encode ran before the bound.
func BenchmarkTooLargeIncompressible(b *testing.B) {
	merged := incompressible(b, 5<<20)
	b.Run("bounded", func(b *testing.B) {
		b.SetBytes(int64(len(merged)))
		for b.Loop() {
			var tl *TooLargeError
			if _, err := Encode(merged, Options{}); !errors.As(err, &tl) || !tl.Bounded {
				b.Fatalf("want a bounded TooLargeError, got %v", err)
			}
		}
	})
	b.Run("ladder", func(b *testing.B) {
		b.SetBytes(int64(len(merged)))
		for b.Loop() {
			for _, lvl := range DefaultLevels {
				if _, err := Compress(merged, lvl); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// BenchmarkProbeGain reports how many times smaller the strongest level's output is than the
// probe's on the standard sample: the largest such gain measured, which MaxGain must exceed.
func BenchmarkProbeGain(b *testing.B) {
	merged := standardMerged(b)
	strongest := DefaultLevels[len(DefaultLevels)-1]
	var p, s string
	for b.Loop() {
		var err error
		if p, err = Compress(merged, Probe); err != nil {
			b.Fatal(err)
		}
		if s, err = Compress(merged, strongest); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(p))/float64(len(s)), "gain")
}
