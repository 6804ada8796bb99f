package controller

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/budget"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/source"
)

// AssumedMemoryLimit is the Go memory limit budgets are derived from when GOMEMLIMIT is not
// set: 90 % of the chart's 512 MiB container limit, which is what the chart sets it to.
const AssumedMemoryLimit = 512 << 20 * 9 / 10

// GoMemoryLimit is the process' Go memory limit (GOMEMLIMIT), or AssumedMemoryLimit when none
// is set.
func GoMemoryLimit() int64 {
	if l := debug.SetMemoryLimit(-1); l > 0 && l < math.MaxInt64 {
		return l
	}
	return AssumedMemoryLimit
}

// DeliveryMemory is the default of Options.MemoryBytes for a Go memory limit: two fifths of it.
// The rest is for what deliveries hold before they are admitted (retrievals waiting, up to
// --source-concurrency contents), the rollouts' push bodies (twice the content limit) and the
// manager's caches.
func DeliveryMemory(goLimit int64) int64 { return goLimit / 5 * 2 }

// ContentLimit is the default content limit (--decofile-max-content-bytes) for a delivery
// memory of memoryBytes: two fifths of the content budget (half of it), so that content at the
// limit, its merged form and the canonicaliser's records fit that budget; at most 64 MiB.
func ContentLimit(memoryBytes int64) int64 {
	return min(source.DefaultLimits.DecompressedBytes, memoryBytes/2/5*2)
}

// memory bounds what deliveries hold while they merge and encode: content (the blocks, the
// merged JSON and the canonicaliser's records) from the end of the retrieval to the end of the
// delivery, and the compressors' state, in two budgets of half Options.MemoryBytes each. They
// are apart so that a delivery holding content never waits for memory that only deliveries
// waiting the same way could give back; compressors hold theirs only while they run.
type memory struct {
	content, compression *budget.Budget
}

func newMemory(total int64) memory {
	half := max(total/2, 1)
	return memory{content: budget.New(half, max(half/2, 1)), compression: budget.New(half, max(half/2, 1))}
}

// admit waits until the merge of blocks fits in the content budget and returns what gives it
// back. Content past the bounds, or needing more than the whole budget, is TooLarge: it would
// never fit.
func (r *Reconciler) admit(ctx context.Context, ns string, blocks source.Blocks) (func(), error) {
	need, err := encode.MergeMemory(blocks, r.bounds())
	if err != nil {
		return nil, tooLarge(err)
	}
	for k, v := range blocks {
		need += int64(len(k) + len(v)) // held already, until the delivery ends
	}
	release, err := r.memory.content.Acquire(ctx, ns, need)
	var tl *budget.TooLargeError
	if errors.As(err, &tl) {
		return nil, &source.Error{Reason: decov1.ReasonTooLarge, Err: fmt.Errorf("merging this content takes about %d bytes of memory, more than the %d bytes all deliveries may hold together (half of --decofile-memory-bytes, derived from the memory limit); reduce the content or raise the manager's memory limit", tl.Want, tl.Total)}
	}
	if err != nil {
		return nil, &source.Error{Reason: ReasonStoreFailed, Transient: true, Err: err}
	}
	return release, nil
}

// encodeOptions are r's encode options for a delivery in namespace ns: each compression waits
// for its state to fit in the compression budget, and levels needing more than all of it are
// not tried.
func (r *Reconciler) encodeOptions(ctx context.Context, ns string) encode.Options {
	o := r.opts.Encode
	o.MaxMemory = r.memory.compression.Total()
	o.Admit = func(n int64) (func(), error) {
		release, err := r.memory.compression.Acquire(ctx, ns, n)
		if err != nil {
			return nil, &source.Error{Reason: ReasonStoreFailed, Transient: true, Err: fmt.Errorf("compress: %w", err)}
		}
		return release, nil
	}
	return o
}

// bounds are the limits of a Decofile's JSON: the configured ones, with the merged size
// bounded by the content limit.
func (r *Reconciler) bounds() encode.Bounds {
	b := r.opts.Bounds
	if b.Bytes <= 0 {
		b.Bytes = r.contentLimit()
	}
	return b
}

// tooLarge turns a bound the content is past into a TooLarge failure naming the flag to change.
func tooLarge(err error) error {
	var be *encode.BoundError
	if !errors.As(err, &be) {
		return &source.Error{Reason: source.ReasonInvalidContent, Err: err}
	}
	flag := map[string]string{encode.BoundMembers: "--decofile-max-members", encode.BoundDepth: "--decofile-max-depth", encode.BoundBytes: "--decofile-max-content-bytes"}[be.Bound]
	return &source.Error{Reason: decov1.ReasonTooLarge, Err: fmt.Errorf("%w (limit: %s); nothing was decoded", err, flag)}
}
