package source

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
)

// ExtractTarGz reads the block files under folder from a gzip-compressed tar stream, as OCI
// artifacts and Flux source artifacts carry them. The decompressed stream is bounded by the
// archive limit (a small layer can inflate to gigabytes), the block files by the content limit
// and the entries by the entry limit; nothing past a bound is read.
func ExtractTarGz(r io.Reader, folder string, l Limits) (Blocks, error) {
	l = l.WithDefaults()
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, &Error{Reason: ReasonInvalidArchive, Err: fmt.Errorf("read gzip stream: %w", err)}
	}
	defer func() { _ = zr.Close() }()
	inflated := &cappedReader{r: zr, left: l.ArchiveBytes}
	tr := tar.NewReader(inflated)
	c := newCollector(folder, l)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if inflated.over {
				return nil, inflatedTooBig(l)
			}
			return nil, &Error{Reason: ReasonInvalidArchive, Err: fmt.Errorf("read tar stream: %w", err)}
		}
		if err := c.visit(); err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg {
			continue // folders, links and devices carry no blocks
		}
		p := CleanPath(h.Name)
		if !c.match(p) {
			continue
		}
		if err := c.add(p, h.Size, func() (io.ReadCloser, error) { return io.NopCloser(tr), nil }); err != nil {
			if inflated.over {
				return nil, inflatedTooBig(l)
			}
			return nil, err
		}
	}
	if inflated.over {
		return nil, inflatedTooBig(l)
	}
	return c.result()
}

func inflatedTooBig(l Limits) error {
	return errorf(ReasonLimitExceeded, false, "the archive inflates to more than %d bytes (limit: archive bytes, %s)", l.ArchiveBytes, flagArchiveBytes)
}

// cappedReader ends with an error after left bytes and remembers that it did.
type cappedReader struct {
	r    io.Reader
	left int64
	over bool
}

var errCapped = errors.New("archive limit reached")

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		c.over = true
		return 0, errCapped
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}
