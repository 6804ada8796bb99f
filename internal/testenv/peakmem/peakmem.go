// Package peakmem measures the most memory this process used while a benchmark or test ran: the
// peak resident set the kernel reports (VmHWM, reset at the start) and the peak Go heap, sampled.
package peakmem

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync/atomic"
	"time"
)

// Peak is what a Sampler saw.
type Peak struct {
	// RSS is the peak resident set size in bytes (VmHWM), or 0 where /proc is not readable.
	RSS uint64
	// Heap is the largest heap sampled: live objects and those not yet collected.
	Heap uint64
	// StartHeap is the heap when sampling started, after a collection.
	StartHeap uint64
}

// HeapGrowth is how much the heap grew above where it started.
func (p Peak) HeapGrowth() uint64 { return p.Heap - min(p.StartHeap, p.Heap) }

// MiB returns n bytes in mebibytes, for b.ReportMetric.
func MiB(n uint64) float64 { return float64(n) / (1 << 20) }

// Sampler samples the heap every millisecond until Stop.
type Sampler struct {
	peak  atomic.Uint64
	start uint64
	stop  chan struct{}
	done  chan struct{}
}

// Start returns memory to the system, resets the kernel's peak RSS of this process and starts
// sampling the heap, so the peaks Stop reports are the ones reached from now on.
func Start() *Sampler {
	runtime.GC()
	debug.FreeOSMemory()
	// "5" resets VmHWM to the current RSS (Linux 4.0 and later).
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
	s := &Sampler{stop: make(chan struct{}), done: make(chan struct{})}
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	read := func() {
		metrics.Read(sample)
		if v := sample[0].Value.Uint64(); v > s.peak.Load() {
			s.peak.Store(v)
		}
	}
	metrics.Read(sample)
	s.start = sample[0].Value.Uint64()
	go func() {
		defer close(s.done)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			read()
			select {
			case <-s.stop:
				read()
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// Stop ends sampling and returns the peaks.
func (s *Sampler) Stop() Peak {
	close(s.stop)
	<-s.done
	return Peak{RSS: hwm(), Heap: s.peak.Load(), StartHeap: s.start}
}

// hwm reads VmHWM from /proc/self/status.
func hwm() uint64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("VmHWM:")) {
			continue
		}
		fields := bytes.Fields(line[len("VmHWM:"):])
		if len(fields) == 0 {
			return 0
		}
		kb, err := strconv.ParseUint(string(fields[0]), 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}
