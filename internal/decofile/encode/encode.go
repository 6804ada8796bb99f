// Package encode turns a Decofile's blocks into the bytes stored for pods: one canonical JSON
// document (keys sorted, no HTML escaping, so equal content gives equal bytes and an equal
// SHA-256), stored as-is when small or as base64 of brotli when large, escalating the brotli
// quality only when the fast form would not fit in a ConfigMap.
package encode

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/andybalholm/brotli"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

// ConfigMapLimit is the most data the API server accepts in one ConfigMap: the sum of the
// values' lengths (keys do not count), checked against a real API server by the controller tests.
const ConfigMapLimit = 1 << 20

// DefaultThreshold is the merged-JSON size above which the content is compressed (seed: 2.5 MB).
const DefaultThreshold = 2_500_000

// timestampReserve is room left for the value of timestamp.txt (Unix seconds, at most 20 digits).
const timestampReserve = 20

// Level is one brotli setting of the escalation ladder.
type Level struct {
	// Quality is the brotli quality, 0–11.
	Quality int
	// LGWin is the log2 of the window size (10–24); 0 lets brotli choose.
	LGWin int
}

func (l Level) String() string { return fmt.Sprintf("q%d/w%d", l.Quality, l.LGWin) }

// DefaultLevels is the escalation ladder: a first level that handles nearly every Decofile in a
// fraction of a second within 1.2× of the strongest setting's size, then stronger ones tried
// only when the result would not fit, ending at the strongest brotli setting so everything whose
// strongest form fits is accepted. The levels were chosen with BenchmarkLevels and
// BenchmarkDefaultLevel on the standard 4.2 MB sample (see docs/benchmarks.md): quality 9 is the
// lowest within 1.2× of quality 11, and a window above 22 makes this brotli slower without
// making it smaller below quality 10.
var DefaultLevels = []Level{{Quality: 9, LGWin: 22}, {Quality: 10, LGWin: 22}, {Quality: 11, LGWin: 24}}

// Probe is the quick brotli setting whose size bounds what the strongest level can reach. It
// has the strongest level's window, so long-distance repeats the strongest level uses are
// seen by the probe too; it takes about 10 ms per MB.
var Probe = Level{Quality: 2, LGWin: 24}

// MaxGain is how many times smaller than the probe the strongest level's output is assumed to
// be at most. The largest gain measured is 4.1× (the standard JSON sample, BenchmarkProbeGain);
// random data, repeated random blocks and repeats megabytes apart gain about 1×. Content whose
// probe is more than MaxGain times the limit is refused without the expensive levels.
const MaxGain = 6

// Options configures Encode.
type Options struct {
	// Threshold is the merged-JSON size above which the content is compressed; 0 means DefaultThreshold.
	Threshold int
	// Limit is the most data a ConfigMap may hold; 0 means ConfigMapLimit.
	Limit int
	// Levels is the brotli escalation ladder; nil means DefaultLevels.
	Levels []Level
	// Admit, when set, is called before each compression with the memory it is estimated to
	// hold (CompressMemory); it returns once that much may be used, with the function that
	// gives it back, or an error that ends Encode.
	Admit func(bytes int64) (release func(), err error)
	// MaxMemory, when set, is the most one compression may hold (CompressMemory): stronger
	// levels that would need more are not tried, and content that only they could fit is too
	// large.
	MaxMemory int64
}

func (o Options) withDefaults() Options {
	if o.Threshold <= 0 {
		o.Threshold = DefaultThreshold
	}
	if o.Limit <= 0 {
		o.Limit = ConfigMapLimit
	}
	if len(o.Levels) == 0 {
		o.Levels = DefaultLevels
	}
	return o
}

// Result is the stored form of one merged JSON document.
type Result struct {
	// Format is json or bin.
	Format decov1.Format
	// Key is the ConfigMap key holding Data (decofile.json or decofile.bin).
	Key string
	// Data is the stored value: the JSON itself, or base64 of its brotli form.
	Data string
	// RawBytes is the size of the merged JSON.
	RawBytes int
	// Level is the brotli setting that produced Data (zero for json).
	Level Level
	// Attempts is how many brotli levels were tried.
	Attempts int
	// Duration is the time spent compressing and encoding.
	Duration time.Duration
}

// StoredBytes is the size of Data.
func (r *Result) StoredBytes() int { return len(r.Data) }

// TooLargeError says that even the strongest compressed form does not fit in a ConfigMap.
type TooLargeError struct {
	// RawBytes is the size of the merged JSON.
	RawBytes int
	// StoredBytes is the size of the smallest stored form.
	StoredBytes int
	// Limit is the most a ConfigMap may hold for this content.
	Limit int
	// Bounded says StoredBytes is the quick probe's size, more than MaxGain times Limit: the
	// stronger levels were not tried.
	Bounded bool
	// MemoryBound says stronger levels were not tried because they would need more memory
	// than Options.MaxMemory; StoredBytes is the smallest size of the levels tried (-1: none).
	MemoryBound bool
}

func (e *TooLargeError) Error() string {
	if e.Bounded {
		return fmt.Sprintf("the Decofile does not fit in a ConfigMap: %d bytes of JSON compress to %d bytes at a quick setting, more than %d times the %d-byte limit, beyond what the strongest setting gains; use spec.target: s3",
			e.RawBytes, e.StoredBytes, MaxGain, e.Limit)
	}
	if e.StoredBytes < 0 {
		return fmt.Sprintf("the Decofile does not fit in a ConfigMap: its %d bytes of JSON are over the %d-byte limit, and compressing this much JSON needs more memory than the operator gives one compression; use spec.target: s3",
			e.RawBytes, e.Limit)
	}
	msg := fmt.Sprintf("the Decofile does not fit in a ConfigMap: %d bytes of JSON compress to %d bytes, over the %d-byte limit; use spec.target: s3",
		e.RawBytes, e.StoredBytes, e.Limit)
	if e.MemoryBound {
		msg += " (stronger compression of this much JSON needs more memory than the operator gives one compression)"
	}
	return msg
}

// Merge builds the canonical merged JSON of blocks within DefaultBounds: an object of block
// name → value, every object's keys sorted, HTML characters (& < >) not escaped, no
// insignificant whitespace.
func Merge(blocks map[string]json.RawMessage) ([]byte, error) {
	return MergeWithin(blocks, DefaultBounds)
}

// MergeWithin is Merge within b: every block is measured first (a *BoundError when they are
// past b, before anything is decoded), then canonicalised one after another straight into the
// one output buffer, so what is held besides the blocks is the output and the member records of
// one block.
func MergeWithin(blocks map[string]json.RawMessage, b Bounds) ([]byte, error) {
	b = b.withDefaults()
	names := make([]string, 0, len(blocks))
	size := int64(2)
	var shape Shape
	for n, v := range blocks {
		names = append(names, n)
		size += int64(len(n) + len(v) + 4)
	}
	slices.Sort(names)
	for _, n := range names {
		var err error
		if shape, err = Measure(blocks[n], b, shape); err != nil {
			return nil, fmt.Errorf("block %q: %w", n, err)
		}
	}
	var buf bytes.Buffer
	buf.Grow(int(min(size, b.Bytes+1)))
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	buf.WriteByte('{')
	for i, n := range names {
		if i > 0 {
			buf.WriteByte(',')
		}
		if err := enc.Encode(n); err != nil {
			return nil, fmt.Errorf("encode block name %q: %w", n, err)
		}
		trimNewline(&buf)
		buf.WriteByte(':')
		if err := canonicalInto(&buf, blocks[n], b.Depth, int(b.Bytes)); err != nil {
			return nil, fmt.Errorf("block %q: %w", n, err)
		}
	}
	buf.WriteByte('}')
	if int64(buf.Len()) > b.Bytes {
		return nil, &BoundError{Bound: BoundBytes, Limit: b.Bytes, Found: int64(buf.Len())}
	}
	return buf.Bytes(), nil
}

// Canonical re-encodes one JSON value the way Merge does.
func Canonical(raw []byte) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(len(raw))
	if err := canonicalFast(&buf, raw); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func trimNewline(buf *bytes.Buffer) {
	if n := buf.Len(); n > 0 && buf.Bytes()[n-1] == '\n' {
		buf.Truncate(n - 1)
	}
}

// Hash is the hex SHA-256 of the merged JSON, the content version recorded in status.contentHash.
func Hash(merged []byte) string {
	sum := sha256.Sum256(merged)
	return hex.EncodeToString(sum[:])
}

// Fits reports whether a stored value of n bytes, plus timestamp.txt, fits in limit.
func Fits(n, limit int) bool { return n+timestampReserve <= limit }

// Encode chooses the stored form of merged: the JSON itself when it is at most Threshold bytes
// and fits, otherwise base64 of brotli, trying each level of the ladder until the result fits.
// When nothing fits it returns a *TooLargeError with the smallest size reached. Large content
// is first compressed at Probe: when that is more than MaxGain times the limit, no level would
// fit and the expensive ones (seconds per megabyte at the strongest) are not run. Compressed
// forms that do not fit are counted, never kept, so what Encode holds besides merged is the
// compressor's state (Options.Admit bounds it) and at most one stored value.
func Encode(merged []byte, o Options) (*Result, error) {
	o = o.withDefaults()
	start := time.Now()
	if len(merged) <= o.Threshold && Fits(len(merged), o.Limit) {
		return &Result{Format: decov1.FormatJSON, Key: decov1.KeyJSON, Data: string(merged), RawBytes: len(merged), Duration: time.Since(start)}, nil
	}
	if err := probe(merged, o); err != nil {
		return nil, err
	}
	best, skipped := -1, false
	for i, lvl := range o.Levels {
		if o.MaxMemory > 0 && CompressMemory(len(merged), lvl) > o.MaxMemory {
			skipped = true
			continue
		}
		data, size, err := compressAdmitted(merged, lvl, o.Limit, o.Admit)
		if err != nil {
			return nil, err
		}
		if Fits(size, o.Limit) {
			return &Result{Format: decov1.FormatBin, Key: decov1.KeyBin, Data: string(data), RawBytes: len(merged), Level: lvl, Attempts: i + 1, Duration: time.Since(start)}, nil
		}
		if best < 0 || size < best {
			best = size
		}
	}
	return nil, &TooLargeError{RawBytes: len(merged), StoredBytes: best, Limit: o.Limit - timestampReserve, MemoryBound: skipped}
}

// probe returns a *TooLargeError when the quick form of merged proves that no level fits.
// Content whose probe could not exceed MaxGain times the limit (its base64 is at most 4/3 of
// its size, plus a little) skips it.
func probe(merged []byte, o Options) error {
	budget := o.Limit - timestampReserve
	if len(merged)/3*4 <= MaxGain*budget {
		return nil
	}
	if o.MaxMemory > 0 && CompressMemory(len(merged), Probe) > o.MaxMemory {
		return nil // the levels are bounded the same way
	}
	_, size, err := compressAdmitted(merged, Probe, 0, o.Admit)
	if err != nil {
		return err
	}
	if size <= MaxGain*budget {
		return nil
	}
	return &TooLargeError{RawBytes: len(merged), StoredBytes: size, Limit: budget, Bounded: true}
}

// compressAdmitted is compress once admit (when set) let the level's state in.
func compressAdmitted(data []byte, lvl Level, keep int, admit func(int64) (func(), error)) ([]byte, int, error) {
	if admit != nil {
		release, err := admit(CompressMemory(len(data), lvl))
		if err != nil {
			return nil, 0, err
		}
		defer release()
	}
	return compress(data, lvl, keep)
}

// Compress returns base64 (standard encoding) of the brotli form of data at lvl.
func Compress(data []byte, lvl Level) (string, error) {
	out, _, err := compress(data, lvl, math.MaxInt)
	return string(out), err
}

// compress returns base64 of the brotli form of data at lvl when it is at most keep bytes, and
// its size in any case: a larger form is counted, not held.
func compress(data []byte, lvl Level, keep int) ([]byte, int, error) {
	sink := &boundedSink{keep: keep}
	if keep >= len(data)/4 {
		sink.buf = make([]byte, 0, len(data)/6)
	}
	enc := base64.NewEncoder(base64.StdEncoding, sink)
	w := brotli.NewWriterOptions(enc, brotli.WriterOptions{Quality: lvl.Quality, LGWin: window(len(data), lvl.LGWin)})
	if _, err := w.Write(data); err != nil {
		return nil, 0, fmt.Errorf("brotli compress: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, 0, fmt.Errorf("brotli compress: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, 0, fmt.Errorf("base64 encode: %w", err)
	}
	if sink.n > keep {
		return nil, sink.n, nil
	}
	return sink.buf, sink.n, nil
}

// window is the brotli window for n bytes of input: lgwin, or less when the input is smaller
// than the window (no match can reach further back than the input is long, and the
// compressor's tables grow with the window: 128 MiB at 24 for the strongest quality).
func window(n, lgwin int) int {
	if lgwin <= 0 {
		return lgwin
	}
	need := max(bits.Len(uint(max(n, 1)-1)), 16) // 64 KiB, brotli's smallest block, as the floor
	return min(lgwin, need)
}

// boundedSink keeps the first keep bytes written to it and counts the rest.
type boundedSink struct {
	buf  []byte
	keep int
	n    int
}

func (s *boundedSink) Write(p []byte) (int, error) {
	s.n += len(p)
	if s.n <= s.keep {
		s.buf = append(s.buf, p...)
	} else {
		s.buf = nil
	}
	return len(p), nil
}

// CompressMemory estimates the heap compressing n bytes at lvl holds besides its input, from
// the window it uses (the input's size, at most lvl.LGWin): ring buffer and hash tables, and at
// qualities 10 and 11 the binary-tree forest and the block optimiser. The constants fit what
// peakmem measured on the sample content from 256 KiB to 64 MiB (GOGC=10), rounded up: quality
// 2 at 16 MiB 36 MiB, quality 9 at 16 MiB 68 MiB, quality 11 at 16 MiB 213 MiB.
func CompressMemory(n int, lvl Level) int64 {
	lgwin := lvl.LGWin
	if lgwin <= 0 {
		lgwin = 22 // brotli's default
	}
	win := int64(1) << window(n, lgwin)
	size := int64(n)
	switch {
	case lvl.Quality >= 10:
		return 10*win + 40<<20 + 2*size
	case lvl.Quality >= 5:
		return 56<<20 + 2*win + size/3
	default:
		return 5*win + 2<<20
	}
}

// Decode returns the merged JSON held by a stored value of the given format, reading at most
// limit bytes of JSON (so a hostile value cannot exhaust memory).
func Decode(format decov1.Format, data string, limit int64) ([]byte, error) {
	switch format {
	case decov1.FormatJSON:
		return []byte(data), nil
	case decov1.FormatBin:
		r := brotli.NewReader(base64.NewDecoder(base64.StdEncoding, strings.NewReader(data)))
		out, err := io.ReadAll(io.LimitReader(r, limit+1))
		if err != nil {
			return nil, fmt.Errorf("decode decofile.bin: %w", err)
		}
		if int64(len(out)) > limit {
			return nil, fmt.Errorf("decode decofile.bin: more than %d bytes of JSON", limit)
		}
		return out, nil
	default:
		return nil, fmt.Errorf("unknown format %q (want json or bin)", format)
	}
}
