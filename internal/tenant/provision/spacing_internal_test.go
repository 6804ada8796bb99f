package provision

import (
	"testing"
	"time"
)

func TestSpacerOneSlotPerInterval(t *testing.T) {
	s := &spacer{interval: time.Second}
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	steps := []struct {
		at   time.Duration
		key  string
		want time.Duration
	}{
		{0, "a", 0}, // a free slot: at once
		{100 * time.Millisecond, "a", 900 * time.Millisecond},  // deferred to the next slot
		{200 * time.Millisecond, "a", 800 * time.Millisecond},  // joins it
		{200 * time.Millisecond, "b", 0},                       // another namespace is not slowed
		{1000 * time.Millisecond, "a", time.Second},            // the slot at 1s is taken: the one after
		{2500 * time.Millisecond, "a", 500 * time.Millisecond}, // the 2s slot was given out: the next one
		{4 * time.Second, "a", 0},                              // past every slot given out: at once
	}
	for _, st := range steps {
		if got := s.delay(st.key, t0.Add(st.at)); got != st.want {
			t.Errorf("request for %s at %v waits %v, want %v", st.key, st.at, got, st.want)
		}
	}
}
