package egress

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
)

// TestBudgetStopsPastLimit: a body and a connection read through one budget stop with
// ErrBudgetExceeded once together they passed the limit, and the budget says so afterwards.
func TestBudgetStopsPastLimit(t *testing.T) {
	b := NewBudget(100)
	if _, err := io.ReadAll(b.Body(io.NopCloser(strings.NewReader(strings.Repeat("x", 60))))); err != nil {
		t.Fatalf("60 bytes of 100: %v", err)
	}
	if b.Exceeded() {
		t.Fatal("exceeded after 60 bytes of 100")
	}
	server, client := net.Pipe()
	defer server.Close()
	go func() { _, _ = server.Write([]byte(strings.Repeat("y", 60))); _ = server.Close() }()
	_, err := io.ReadAll(b.Conn(client))
	if !errors.Is(err, ErrBudgetExceeded) || !b.Exceeded() {
		t.Fatalf("120 bytes of 100: err %v, exceeded %v; want ErrBudgetExceeded", err, b.Exceeded())
	}
}
