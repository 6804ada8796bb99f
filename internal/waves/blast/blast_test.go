package blast

import (
	"reflect"
	"testing"

	"github.com/siteops/siteops/internal/waves/graph"
)

// small is a graph whose radii are worked out by hand below:
//
//	wave 0: a, b, v (unit anchored to a, same wave)
//	wave 1: c → a, e → b, g (non-gating unit above b), h (non-gating unit anchored to c, same wave)
//	wave 2: d → c, u (unit above c)
func small(t *testing.T) (*graph.Waves, Options) {
	t.Helper()
	w, err := graph.Compute(graph.Input{
		Services: []graph.Service{{Name: "a"}, {Name: "b"}, {Name: "c", DependsOn: []string{"a"}}, {Name: "d", DependsOn: []string{"c"}}, {Name: "e", DependsOn: []string{"b"}}},
		Units:    []graph.Unit{{Name: "u", Anchor: "c", Above: true}, {Name: "v", Anchor: "a"}, {Name: "g", Anchor: "b", Above: true}, {Name: "h", Anchor: "c"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return w, Options{Units: map[string]Unit{"u": {Above: true}, "v": {}, "g": {Above: true, NonGating: true}, "h": {NonGating: true}}}
}

func TestRadiiByHand(t *testing.T) {
	w, o := small(t)
	want := map[string][2][]string{
		// A wave-0 failure holds waves 1 and 2 back, and both non-gating units: g waits for
		// wave 0 (the wave below it), h for wave 1 (its anchor's wave). Exactly, only c and what
		// sits on c (d, u; h runs beside c so it waits for c's dependency a) wait for a.
		"a": {{"c", "e", "g", "h", "d", "u"}, {"c", "h", "d", "u"}},
		"b": {{"c", "e", "g", "h", "d", "u"}, {"e", "g"}},
		"v": {{"c", "e", "g", "h", "d", "u"}, {}},
		// Wave 1 holds wave 2 back and h (which waits for wave 1), not g (which waits for wave 0).
		"c": {{"h", "d", "u"}, {"d", "u"}},
		"e": {{"h", "d", "u"}, {}},
		"d": {{}, {}},
		"u": {{}, {}},
		// Nothing waits for a non-gating unit.
		"g": {{}, {}},
		"h": {{}, {}},
	}
	all := All(w, o)
	if len(all) != len(want) {
		t.Fatalf("%d radii, want %d", len(all), len(want))
	}
	for n, wv := range want {
		r := all[n]
		if !reflect.DeepEqual(r.Chain, wv[0]) || !reflect.DeepEqual(r.Exact, wv[1]) {
			t.Errorf("%s: chain %v exact %v; want chain %v exact %v", n, r.Chain, r.Exact, wv[0], wv[1])
		}
	}
	if got := len(all["a"].Chain); got != 6 {
		t.Errorf("a blocks %d under the chain, want 6", got)
	}
}

func TestCountOnlyPlaced(t *testing.T) {
	w, o := small(t)
	o.Count = func(n string) bool { return n != "d" && n != "h" }
	r, err := Of(w, "a", o)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.Chain, []string{"c", "e", "g", "u"}) || !reflect.DeepEqual(r.Exact, []string{"c", "u"}) {
		t.Fatalf("chain %v exact %v", r.Chain, r.Exact)
	}
	if _, err := Of(w, "zz", o); err == nil {
		t.Fatal("an unknown node has no radius")
	}
}

func TestExactDependencies(t *testing.T) {
	w, _ := small(t)
	for n, want := range map[string][]string{"d": {"c"}, "u": {"c"}, "v": nil, "h": {"a"}, "g": {"b"}} {
		if got := w.ExactDependencies(n); !reflect.DeepEqual(got, want) {
			t.Errorf("%s waits for %v, want %v", n, got, want)
		}
	}
}
