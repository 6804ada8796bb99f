package notify

import (
	"bytes"
	"io"
)

// bodyReader is one request's read position in a body shared by every request of a rollout:
// bytes.Reader keeps a position, not a copy. bodyConn recognises it.
//
// Keeping the body in a memfd and letting net/http send it with sendfile(2) was measured too: on
// loopback it cost more system time than plain writes (BenchmarkRollout, 1000 pods), so the heap
// slice it is.
type bodyReader struct{ *bytes.Reader }

// Close implements io.Closer; there is nothing to release.
func (*bodyReader) Close() error { return nil }

// opener returns a GetBody function that reads data from the start each time.
func opener(data []byte) func() (io.ReadCloser, error) {
	return func() (io.ReadCloser, error) { return &bodyReader{Reader: bytes.NewReader(data)}, nil }
}
