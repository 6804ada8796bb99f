package siteruntime

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/andybalholm/brotli"
)

// AcceptEncoding is what the runtime advertises on its reload answers (RFC 7694): the request
// content codings a pushed body may have. The operator learns it from the first answer and
// sends later pushes compressed.
const AcceptEncoding = "br, gzip"

// bodyError is a push body the runtime does not take, with the status to answer.
type bodyError struct {
	code int
	msg  string
}

func (e *bodyError) Error() string { return e.msg }

// readBody reads a pushed body, decoding its Content-Encoding (none, br or gzip). Both the bytes
// on the wire and the decoded bytes are bounded by max: a small compressed body that expands
// beyond it (a decompression bomb) is refused with 413 after reading at most max+1 decoded bytes.
func readBody(w http.ResponseWriter, req *http.Request, max int64) ([]byte, error) {
	wire := http.MaxBytesReader(w, req.Body, max)
	var body io.Reader
	switch coding := strings.ToLower(strings.TrimSpace(req.Header.Get("Content-Encoding"))); coding {
	case "", "identity":
		body = wire
	case "br":
		body = brotli.NewReader(wire)
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(wire)
		if err != nil {
			return nil, readError(err, "gzip")
		}
		defer zr.Close()
		body = zr
	default:
		return nil, &bodyError{http.StatusUnsupportedMediaType,
			fmt.Sprintf("Content-Encoding %.40q is not supported (accepted: %s)", coding, AcceptEncoding)}
	}
	raw, err := io.ReadAll(io.LimitReader(body, max+1))
	if err != nil {
		return nil, readError(err, "body")
	}
	if int64(len(raw)) > max {
		return nil, &bodyError{http.StatusRequestEntityTooLarge, fmt.Sprintf("decoded body is larger than %d bytes", max)}
	}
	return raw, nil
}

func readError(err error, what string) error {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return &bodyError{http.StatusRequestEntityTooLarge, fmt.Sprintf("body is larger than %d bytes", tooLarge.Limit)}
	}
	return &bodyError{http.StatusBadRequest, fmt.Sprintf("read %s: %v", what, err)}
}
