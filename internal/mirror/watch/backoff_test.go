package watch

import (
	"testing"
	"time"
)

// TestReconnectBackoffDoublesToItsCap: failures in a row wait 500 ms, 1 s, 2 s, … and never
// more than 30 s, however many there are.
func TestReconnectBackoffDoublesToItsCap(t *testing.T) {
	b := reconnectBackoff()
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second}
	for i, w := range want {
		if got := b.Step(); got != w {
			t.Fatalf("wait %d = %s, want %s", i+1, got, w)
		}
	}
	for range 1000 {
		b.Step()
	}
	if got := b.Step(); got != 30*time.Second {
		t.Fatalf("after a thousand failures the wait is %s, want the 30 s cap", got)
	}
}
