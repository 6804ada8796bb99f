package lastwrite

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestPending(t *testing.T) {
	var tr Tracker
	key := types.NamespacedName{Namespace: "a", Name: "site"}
	if _, ok := tr.Pending(key, "5"); ok {
		t.Fatal("nothing written, yet a write is pending")
	}
	tr.Wrote(key, "")
	if _, ok := tr.Pending(key, "5"); ok {
		t.Fatal("an empty resourceVersion was recorded")
	}
	tr.Wrote(key, "10")
	for _, seen := range []string{"9", "", "not-a-version"} {
		if rv, ok := tr.Pending(key, seen); !ok || rv != "10" {
			t.Fatalf("read at %q: Pending = %q, %v; want the write at 10", seen, rv, ok)
		}
	}
	if _, ok := tr.Pending(key, "10"); ok {
		t.Fatal("a read at the write's resourceVersion still waits for it")
	}
	if _, ok := tr.Pending(key, "9"); ok {
		t.Fatal("the write was not forgotten once a read included it")
	}
	tr.Wrote(key, "12")
	if _, ok := tr.Pending(key, "13"); ok {
		t.Fatal("a read newer than the write waits for it")
	}
	tr.Wrote(key, "14")
	tr.Wrote(types.NamespacedName{Namespace: "a", Name: "other"}, "3")
	if n := tr.Len(); n != 2 {
		t.Fatalf("Len = %d, want 2", n)
	}
	tr.Forget(key)
	if _, ok := tr.Pending(key, "1"); ok {
		t.Fatal("Forget kept the write")
	}
}
