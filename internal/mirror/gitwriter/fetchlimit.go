package gitwriter

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/go-git/go-git/v5/plumbing/format/packfile"
)

// The flags that bound a fetch, named in the errors so an operator knows what to raise.
const (
	// FlagMaxFetchBytes bounds the bytes received from the remote in one exchange.
	FlagMaxFetchBytes = "--git-max-fetch-bytes"
	// FlagMaxFetchObjectBytes bounds the inflated size of the objects one fetch stores.
	FlagMaxFetchObjectBytes = "--git-max-fetch-object-bytes"
)

// Defaults of the fetch bounds. A depth-1 fetch of a mirror repository is clean YAML, which
// compresses several times over, so 256 MiB of objects is a large cluster's tree; it and its
// 64 MiB pack, held while the pack is parsed, leave a manager with a 512 MiB memory limit room
// for everything else.
const (
	DefaultMaxFetchBytes       = 64 << 20
	DefaultMaxFetchObjectBytes = 256 << 20
)

// ReasonFetchTooLarge is the condition reason of a remote that sent more than a fetch bound.
const ReasonFetchTooLarge = "FetchTooLarge"

// ErrFetchTooLarge is the kind (see RemoteError) of an exchange stopped by a fetch bound.
var ErrFetchTooLarge = errors.New("the remote sent more than a fetch bound allows")

// objectOverhead is what each object of a pack counts against the object bound besides its
// size: the bookkeeping of the parser and the store, so a pack of millions of empty objects is
// bounded too.
const objectOverhead = 512

// objectsTooLarge is a pack refused for the size of its objects, found before they are inflated.
type objectsTooLarge struct {
	limit int64
}

func (e *objectsTooLarge) Error() string {
	return fmt.Sprintf("the objects would take more than %d bytes once inflated", e.limit)
}

func (e *objectsTooLarge) Is(target error) bool { return target == ErrFetchTooLarge }

// packTooLarge is a pack longer than the bytes bound (the transport's count normally stops it
// first).
type packTooLarge struct{ limit int64 }

func (e *packTooLarge) Error() string {
	return fmt.Sprintf("the pack is longer than %d bytes", e.limit)
}

func (e *packTooLarge) Is(target error) bool { return target == ErrFetchTooLarge }

// PackfileWriter takes a fetched pack whole: go-git hands it over here instead of parsing it
// into the store, where it would inflate every object into memory before anyone could look at
// its size. The pack is kept compressed (at most maxPackBytes), checked against maxObjectBytes
// from the sizes it declares — each object's, and each delta's result — and only then parsed
// into the store. go-git holds every object to its declared size while inflating and every delta
// to its declared result, so the check bounds what the parse stores.
func (s *objectStore) PackfileWriter() (io.WriteCloser, error) {
	return &packWriter{s: s}, nil
}

type packWriter struct {
	s   *objectStore
	buf bytes.Buffer
	err error
}

func (p *packWriter) Write(b []byte) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	if int64(p.buf.Len())+int64(len(b)) > p.s.maxPackBytes {
		p.err = &packTooLarge{limit: p.s.maxPackBytes}
		return 0, p.err
	}
	return p.buf.Write(b)
}

// Close checks and parses the pack. A pack cut short (the transport stopped it) fails the check
// on its checksum, so nothing of it is stored.
func (p *packWriter) Close() error {
	defer func() { p.buf = bytes.Buffer{} }()
	if p.err != nil {
		return p.err
	}
	data := p.buf.Bytes()
	if err := checkPack(data, p.s.maxObjectBytes); err != nil {
		return err
	}
	parser, err := packfile.NewParserWithStorage(packfile.NewScanner(bytes.NewReader(data)), p.s)
	if err != nil {
		return err
	}
	_, err = parser.Parse()
	return err
}

// checkPack reads pack's object headers and returns an *objectsTooLarge when its objects, once
// inflated, would take more than limit bytes. Only the first bytes of each delta are inflated
// (to read the size of its result); every other object is skipped unread.
func checkPack(pack []byte, limit int64) error {
	sc := packfile.NewScanner(bytes.NewReader(pack))
	_, count, err := sc.Header()
	if err != nil {
		return err
	}
	if int64(count)*objectOverhead > limit {
		return &objectsTooLarge{limit: limit}
	}
	total := int64(count) * objectOverhead
	for range count {
		oh, err := sc.NextObjectHeader()
		if err != nil {
			return err
		}
		// The object itself (a delta's instructions are inflated into memory too while the
		// parse resolves it), refused before any of it is inflated.
		if oh.Length < 0 || oh.Length > limit-total {
			return &objectsTooLarge{limit: limit}
		}
		if !oh.Type.IsDelta() {
			total += oh.Length
			continue
		}
		var h deltaHeader
		if _, _, err := sc.NextObject(&h); err != nil {
			return err
		}
		size, ok := h.targetSize()
		if !ok {
			return packfile.ErrInvalidDelta
		}
		if size > limit-total {
			return &objectsTooLarge{limit: limit}
		}
		total += size
	}
	_, err = sc.Checksum()
	return err
}

// deltaHeader keeps the first bytes of a delta, where the sizes of its base and result are.
type deltaHeader struct {
	b [20]byte
	n int
}

func (h *deltaHeader) Write(p []byte) (int, error) {
	h.n += copy(h.b[min(h.n, len(h.b)):], p)
	return len(p), nil
}

// targetSize decodes the delta's second size (base size, then result size; LEB128 each).
func (h *deltaHeader) targetSize() (int64, bool) {
	b := h.b[:min(h.n, len(h.b))]
	var size int64
	for field := range 2 {
		size = 0
		for shift := 0; ; shift += 7 {
			if len(b) == 0 || shift > 56 {
				return 0, false
			}
			c := b[0]
			b = b[1:]
			size |= int64(c&0x7f) << shift
			if c&0x80 == 0 {
				break
			}
		}
		_ = field
	}
	return size, size >= 0
}
