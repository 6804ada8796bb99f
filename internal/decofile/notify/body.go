package notify

import (
	"bytes"
	"io"
)

// bodySource hands every request its own reader over one shared copy of the push body.
type bodySource interface {
	open() (io.ReadCloser, error)
	close() error
}

// bytesSource reads the caller's slice in place (bytes.Reader keeps no copy).
type bytesSource []byte

func (b bytesSource) open() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
func (bytesSource) close() error                   { return nil }

// sendfileThreshold is the body size from which a kernel-side copy (see body_linux.go) pays off.
const sendfileThreshold = 64 << 10
