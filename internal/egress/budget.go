package egress

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
)

// ErrBudgetExceeded is returned by the readers of a Budget once the remote sent more than its
// limit.
var ErrBudgetExceeded = errors.New("the remote sent more than the byte limit")

// Budget counts the bytes one operation receives from a remote (HTTP response bodies, SSH
// connections) and refuses them past a limit, so a hostile or broken remote cannot make the
// caller read, and hold, without bound. It is safe for concurrent use.
type Budget struct {
	limit    int64
	received atomic.Int64
	exceeded atomic.Bool
}

// NewBudget returns a Budget allowing limit bytes.
func NewBudget(limit int64) *Budget { return &Budget{limit: limit} }

// Exceeded reports whether the remote sent more than the limit. Callers check it first when an
// operation fails: the libraries in between may wrap ErrBudgetExceeded into errors that lose it.
func (b *Budget) Exceeded() bool { return b.exceeded.Load() }

// Add records n more bytes received and returns ErrBudgetExceeded once past the limit.
func (b *Budget) Add(n int) error {
	if b.received.Add(int64(n)) > b.limit {
		b.exceeded.Store(true)
		return ErrBudgetExceeded
	}
	return nil
}

// Body wraps an HTTP response body so its bytes count against the budget.
func (b *Budget) Body(rc io.ReadCloser) io.ReadCloser { return &budgetBody{ReadCloser: rc, b: b} }

// Conn wraps a connection so the bytes read from it count against the budget; past the limit
// the connection is closed.
func (b *Budget) Conn(c net.Conn) net.Conn { return &budgetConn{Conn: c, b: b} }

type budgetBody struct {
	io.ReadCloser
	b *Budget
}

func (r *budgetBody) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if berr := r.b.Add(n); berr != nil {
		return n, berr
	}
	return n, err
}

type budgetConn struct {
	net.Conn
	b *Budget
}

func (c *budgetConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if berr := c.b.Add(n); berr != nil {
		_ = c.Close()
		return n, berr
	}
	return n, err
}
