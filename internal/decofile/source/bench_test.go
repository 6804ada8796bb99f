package source

import (
	"bytes"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/encode/sample"
	"github.com/siteops/siteops/internal/decofile/source/ghtest"
)

// BenchmarkBuild is the encode figure: a GitHub-style ZIP of the standard 4.2 MB,
// 360-block sample → extraction → merge → brotli + base64 with the default ladder. It reports
// raw and stored sizes, and the size quality 11 would give on the same input.
func BenchmarkBuild(b *testing.B) {
	files := map[string]string{}
	for n, v := range sample.Generate(sample.Standard) {
		files[".deco/blocks/"+n] = string(v)
	}
	archive := ghtest.Zip("site-0123abc", files)
	b.SetBytes(int64(len(archive)))
	var res *encode.Result
	var merged []byte
	cpu0 := cpuTime()
	for b.Loop() {
		blocks, err := ExtractZip(bytes.NewReader(archive), int64(len(archive)), ".deco/blocks", ZipOptions{StripTopDir: true}, Limits{})
		if err != nil {
			b.Fatal(err)
		}
		if merged, err = encode.Merge(blocks); err != nil {
			b.Fatal(err)
		}
		if res, err = encode.Encode(merged, encode.Options{}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	// CPU time per build, independent of how busy the machine is (wall time is not).
	b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/float64(b.N), "cpu-ms/op")
	q11, err := encode.Compress(merged, encode.Level{Quality: 11, LGWin: 24})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(merged)), "raw-bytes")
	b.ReportMetric(float64(res.StoredBytes()), "stored-bytes")
	b.ReportMetric(float64(len(q11)), "q11-bytes")
	fmt.Fprintf(b.Output(), "build: %d blocks, zip %d B, raw %d B → %s %d B (%.2f%%, %s); quality 11 would give %d B (%.2f%%)\n",
		360, len(archive), len(merged), res.Key, res.StoredBytes(), 100*float64(res.StoredBytes())/float64(len(merged)), res.Level,
		len(q11), 100*float64(len(q11))/float64(len(merged)))
}

// cpuTime is the user+system CPU time of the process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
