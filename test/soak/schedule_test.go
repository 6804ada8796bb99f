package soak

import (
	"reflect"
	"testing"
	"time"
)

func TestPlanIsReplayableAndCoversEveryFault(t *testing.T) {
	a, err := Plan(42, 60*time.Minute, 50*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Plan(42, 60*time.Minute, 50*time.Second)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("the same seed gave two plans")
	}
	if c, _ := Plan(43, 60*time.Minute, 50*time.Second); reflect.DeepEqual(a, c) {
		t.Fatal("seeds 42 and 43 gave the same plan")
	}
	if len(a) < 60 {
		t.Fatalf("%d faults in an hour, want at least 60", len(a))
	}
	seen := map[Fault]int{}
	for i, e := range a {
		seen[e.Fault]++
		if i > 0 && e.At-a[i-1].At < 25*time.Second {
			t.Errorf("faults %d and %d are %s apart: no time to recover", i-1, i, e.At-a[i-1].At)
		}
		if e.At >= 60*time.Minute {
			t.Errorf("fault %d at %s is past the run", i, e.At)
		}
	}
	for _, f := range AllFaults {
		if seen[f] < 3 {
			t.Errorf("%s injected %d times in an hour, want several", f, seen[f])
		}
	}
}

func TestPlanRefusesARunTooShortForEveryFault(t *testing.T) {
	if _, err := Plan(1, time.Minute, 30*time.Second); err == nil {
		t.Fatal("a plan of 2 faults for 7 kinds was accepted")
	}
}
