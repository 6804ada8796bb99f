package manager

import (
	"testing"
	"time"
)

// TestMirrorStopTimeoutFollowsLease: the mirror's writers get half the lease for their last
// push when the leader steps down, unless the mirror's options set it; without leader election
// the writers' own default applies.
func TestMirrorStopTimeoutFollowsLease(t *testing.T) {
	o := DefaultOptions()
	if got := o.mirrorOptions().StopTimeout; got != DefaultLeaseDuration/2 {
		t.Fatalf("stop timeout %s, want half the default lease %s", got, DefaultLeaseDuration/2)
	}
	o.LeaseDuration = 4 * time.Second
	if got := o.mirrorOptions().StopTimeout; got != 2*time.Second {
		t.Fatalf("stop timeout %s with a 4s lease, want 2s", got)
	}
	o.Mirror.StopTimeout = time.Second
	if got := o.mirrorOptions().StopTimeout; got != time.Second {
		t.Fatalf("stop timeout %s, want the mirror's own 1s", got)
	}
	o.Mirror.StopTimeout, o.LeaderElect = 0, false
	if got := o.mirrorOptions().StopTimeout; got != 0 {
		t.Fatalf("stop timeout %s without leader election, want 0 (the writers' default)", got)
	}
}
