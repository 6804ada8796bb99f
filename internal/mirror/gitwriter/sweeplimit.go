package gitwriter

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// The flags that bound a sweep, named in the refusals so an operator knows what to raise.
const (
	// FlagMaxSweepEntries bounds the files and folders one sweep looks at.
	FlagMaxSweepEntries = "--git-max-sweep-entries"
	// FlagMaxSweepChanges bounds the files one sweep removes.
	FlagMaxSweepChanges = "--git-max-sweep-changes"
)

// Defaults of the sweep bounds. A folder holds one file per object of one resource in one
// namespace: 100 000 entries is a very large cluster's, about 20 MiB of index in memory, and
// 10 000 removals make a commit message of under 1 MiB.
const (
	DefaultMaxSweepEntries = 100_000
	DefaultMaxSweepChanges = 10_000
)

// maxSweepDepth bounds how deep a sweep follows folders: the mirror writes none below a
// target's resource folders, and each level costs the walk a longer path for every file.
const maxSweepDepth = 64

// ReasonTargetTooLarge is the condition reason of a target whose folder a sweep refused.
const ReasonTargetTooLarge = "TargetTooLarge"

// ErrTargetTooLarge is the kind of a sweep refused for the size of its folder.
var ErrTargetTooLarge = errors.New("the target's folder is larger than a sweep bound allows")

// folderTooLarge is a sweep refused for the size of its folder: what it found, against which
// flag. The sweep removes nothing; the other changes of the batch are committed.
type folderTooLarge struct {
	dir  string
	what string
}

func (e *folderTooLarge) Error() string {
	return fmt.Sprintf("folder %s was not swept: %s; remove what does not belong there, or raise the limit", e.dir, e.what)
}

func (e *folderTooLarge) Is(target error) bool { return target == ErrTargetTooLarge }

// sweepRefusals are the sweeps a writer refused, by target UID and folder, until a sweep of
// that folder succeeds.
type sweepRefusals map[string]map[string]error

func (r sweepRefusals) set(target, dir string, err error) {
	if r[target] == nil {
		r[target] = map[string]error{}
	}
	r[target][dir] = err
}

func (r sweepRefusals) clear(target, dir string) {
	delete(r[target], dir)
	if len(r[target]) == 0 {
		delete(r, target)
	}
}

// byTarget returns one refusal per target (its first folder, by name).
func (r sweepRefusals) byTarget() map[string]error {
	if len(r) == 0 {
		return nil
	}
	out := make(map[string]error, len(r))
	for target, dirs := range r {
		out[target] = dirs[slices.Sorted(maps.Keys(dirs))[0]]
	}
	return out
}
