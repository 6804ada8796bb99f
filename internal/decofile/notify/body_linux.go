package notify

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// memfdSource keeps the body in an anonymous in-memory file. Each request opens its own file
// description on it, so net/http hands the body to sendfile(2): the kernel sends the pages
// directly instead of copying the payload from the heap for every pod.
type memfdSource struct {
	f    *os.File
	path string
}

func newBodySource(body []byte) bodySource {
	if len(body) < sendfileThreshold {
		return bytesSource(body)
	}
	fd, err := unix.MemfdCreate("decofile-push-body", unix.MFD_CLOEXEC)
	if err != nil {
		return bytesSource(body)
	}
	f := os.NewFile(uintptr(fd), "decofile-push-body")
	if _, err := f.Write(body); err != nil {
		_ = f.Close()
		return bytesSource(body)
	}
	return &memfdSource{f: f, path: fmt.Sprintf("/proc/self/fd/%d", fd)}
}

func (m *memfdSource) open() (io.ReadCloser, error) {
	f, err := os.Open(m.path)
	if err != nil {
		return nil, fmt.Errorf("open push body: %w", err)
	}
	return f, nil
}

func (m *memfdSource) close() error { return m.f.Close() }
