package encode

import (
	"encoding/json"
	"fmt"
)

// Bounds limit what merging one Decofile may cost. Memory and time grow with the bytes and
// with the members (each object member takes a 12-byte record while it is canonicalised), so
// both are counted by a scan that allocates nothing before anything is decoded.
type Bounds struct {
	// Members is the most object members and array elements all blocks may hold together.
	Members int64
	// Depth is the deepest nesting of objects and arrays.
	Depth int
	// Bytes is the largest merged JSON (strings re-encoded with escapes may grow).
	Bytes int64
}

// Defaults of Bounds. DefaultMembers is well above what a Decofile holds (the standard 4.2 MB
// sample has about 90 000 members: 2 million would be about 90 MB of such content) and keeps
// the records below 30 MiB.
const (
	DefaultMembers = 2_000_000
	DefaultDepth   = maxDepth
	DefaultBytes   = 64 << 20
)

// DefaultBounds are used by Merge.
var DefaultBounds = Bounds{Members: DefaultMembers, Depth: DefaultDepth, Bytes: DefaultBytes}

func (b Bounds) withDefaults() Bounds {
	if b.Members <= 0 {
		b.Members = DefaultMembers
	}
	if b.Depth <= 0 {
		b.Depth = DefaultDepth
	}
	if b.Bytes <= 0 {
		b.Bytes = DefaultBytes
	}
	return b
}

// Names of the bounds in a BoundError.
const (
	BoundMembers = "members"
	BoundDepth   = "depth"
	BoundBytes   = "bytes"
)

// BoundError says a Decofile's JSON is past one of the Bounds; nothing was decoded.
type BoundError struct {
	// Bound is BoundMembers, BoundDepth or BoundBytes.
	Bound string
	// Limit is the bound's value; Found is what was counted when the scan stopped.
	Limit, Found int64
}

func (e *BoundError) Error() string {
	switch e.Bound {
	case BoundMembers:
		return fmt.Sprintf("the Decofile's JSON holds more than %d object members and array elements (at least %d)", e.Limit, e.Found)
	case BoundDepth:
		return fmt.Sprintf("the Decofile's JSON nests objects and arrays more than %d deep", e.Limit)
	default:
		return fmt.Sprintf("the Decofile's merged JSON is more than %d bytes (at least %d)", e.Limit, e.Found)
	}
}

// Shape is what Measure counted.
type Shape struct {
	// Members counts object members and array elements (an upper bound for invalid JSON).
	Members int64
	// Depth is the deepest nesting seen.
	Depth int
	// Objects and Keys count objects and object members, which canonicalising keeps records of.
	Objects, Keys int64
}

// Measure counts the members and nesting of raw without decoding or allocating anything, and
// stops with a *BoundError as soon as one is past b. Counts add to already's (Depth is the
// larger of the two).
func Measure(raw []byte, b Bounds, already Shape) (Shape, error) {
	b = b.withDefaults()
	s := already
	depth := 0
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case '"':
			// Skip the string: only an unescaped quote ends it.
			for i++; i < len(raw) && raw[i] != '"'; i++ {
				if raw[i] == '\\' {
					i++
				}
			}
		case ':':
			s.Keys++
			continue
		case '{', '[':
			if raw[i] == '{' {
				s.Objects++
			}
			// An opening counts the container's first member, a comma each further one (an
			// empty container counts one: the scan is an upper bound).
			s.Members++
			if depth++; depth > s.Depth {
				s.Depth = depth
				if depth > b.Depth {
					return s, &BoundError{Bound: BoundDepth, Limit: int64(b.Depth), Found: int64(depth)}
				}
			}
		case '}', ']':
			depth--
		case ',':
			s.Members++
		default:
			continue
		}
		if s.Members > b.Members {
			return s, &BoundError{Bound: BoundMembers, Limit: b.Members, Found: s.Members}
		}
	}
	return s, nil
}

// MergeMemory measures blocks against b (a *BoundError when they are past it) and estimates the
// heap MergeWithin holds on top of them: the merged JSON (about their size) and the records of
// the objects and members of the block being canonicalised (counted for all blocks: an upper
// bound).
func MergeMemory(blocks map[string]json.RawMessage, b Bounds) (int64, error) {
	var s Shape
	var size int64
	for n, v := range blocks {
		var err error
		if s, err = Measure(v, b, s); err != nil {
			return 0, fmt.Errorf("block %q: %w", n, err)
		}
		size += int64(len(n) + len(v) + 4)
	}
	return size + 24*s.Keys + 16*s.Objects, nil
}
