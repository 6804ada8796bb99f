package graph

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// seed is the dependency graph of the seed's homelab.
func seed() Input {
	return Input{
		Services: []Service{
			{Name: "pihole"}, {Name: "gitea"}, {Name: "jackett"}, {Name: "plex"}, {Name: "qbittorrent"},
			{Name: "sonarr", DependsOn: []string{"qbittorrent", "jackett"}},
			{Name: "radarr", DependsOn: []string{"qbittorrent", "jackett"}},
			{Name: "seerr", DependsOn: []string{"sonarr", "radarr"}},
			{Name: "nextcloud", DependsOn: []string{"nextcloud-db"}},
			{Name: "semaphore", DependsOn: []string{"semaphore-db"}},
			{Name: "keycloak", DependsOn: []string{"keycloak-db"}},
			{Name: "vm-demo"},
		},
		Units: []Unit{{Name: "gitea-actions", Anchor: "gitea", Above: true}},
	}
}

func TestComputeSeedWaves(t *testing.T) {
	w, err := Compute(seed())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{
		"pihole": 0, "gitea": 0, "jackett": 0, "plex": 0, "qbittorrent": 0, "nextcloud-db": 0, "semaphore-db": 0,
		"keycloak-db": 0, "vm-demo": 0,
		"sonarr": 1, "radarr": 1, "nextcloud": 1, "semaphore": 1, "gitea-actions": 1, "keycloak": 1,
		"seerr": 2,
	}
	if w.Len() != len(want) {
		t.Errorf("%d nodes, want %d: %v", w.Len(), len(want), w.Nodes())
	}
	for n, wv := range want {
		if got, ok := w.Wave(n); !ok || got != wv {
			t.Errorf("wave(%s) = %d (exists %t), want %d", n, got, ok, wv)
		}
	}
	if k := w.Kind("nextcloud-db"); k != KindDatabase {
		t.Errorf("nextcloud-db kind %q, want database", k)
	}
	if got := w.Path("seerr"); !reflect.DeepEqual(got, []string{"seerr", "radarr", "jackett"}) {
		t.Errorf("path(seerr) = %v", got)
	}
	if got := w.Reason("sonarr"); got != "→ qbittorrent (w0), jackett (w0)" {
		t.Errorf("reason(sonarr) = %q", got)
	}
	if got := w.Reason("gitea-actions"); !strings.Contains(got, "anchor gitea (w0), above") {
		t.Errorf("reason(gitea-actions) = %q", got)
	}
}

func TestLongestPathNotShortest(t *testing.T) {
	// d depends on a directly (wave 1 by that edge) and through b → c → a (wave 3).
	w, err := Compute(Input{Services: []Service{
		{Name: "a"}, {Name: "b", DependsOn: []string{"c"}}, {Name: "c", DependsOn: []string{"a"}},
		{Name: "d", DependsOn: []string{"a", "b"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := w.Wave("d"); got != 3 {
		t.Fatalf("wave(d) = %d, want 3", got)
	}
	if got := w.Path("d"); !reflect.DeepEqual(got, []string{"d", "b", "c", "a"}) {
		t.Fatalf("path(d) = %v", got)
	}
}

func TestCycleIsPrinted(t *testing.T) {
	_, err := Compute(Input{Services: []Service{
		{Name: "a", DependsOn: []string{"b"}}, {Name: "b", DependsOn: []string{"c"}},
		{Name: "c", DependsOn: []string{"a"}}, {Name: "d", DependsOn: []string{"a"}},
	}})
	var ce *CycleError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v, want a CycleError", err)
	}
	if want := "dependency cycle: a → b → c → a"; !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not print the cycle %q", err, want)
	}
}

func TestSelfCycle(t *testing.T) {
	_, err := Compute(Input{Services: []Service{{Name: "a", DependsOn: []string{"a"}}}})
	if err == nil || !strings.Contains(err.Error(), "a → a") {
		t.Fatalf("error %v, want the self cycle", err)
	}
}

func TestMissingAnchor(t *testing.T) {
	in := seed()
	in.Units = []Unit{{Name: "gitea-actions", Anchor: "forgejo", Above: true}}
	_, err := Compute(in)
	var me *MissingAnchorError
	if !errors.As(err, &me) || me.Anchor != "forgejo" || !strings.Contains(err.Error(), `anchored to "forgejo"`) {
		t.Fatalf("error %v, want a MissingAnchorError for forgejo", err)
	}
}

func TestUnknownDependency(t *testing.T) {
	_, err := Compute(Input{Services: []Service{{Name: "a", DependsOn: []string{"redis"}}}})
	var ue *UnknownDependencyError
	if !errors.As(err, &ue) || ue.To != "redis" {
		t.Fatalf("error %v, want UnknownDependencyError for redis", err)
	}
}

func TestDuplicateNode(t *testing.T) {
	_, err := Compute(Input{Services: []Service{{Name: "a"}}, Units: []Unit{{Name: "a", Anchor: "a"}}})
	var de *DuplicateNodeError
	if !errors.As(err, &de) {
		t.Fatalf("error %v, want DuplicateNodeError", err)
	}
}

func TestUnitInAnchorWaveAndChainedUnits(t *testing.T) {
	w, err := Compute(Input{
		Services: []Service{{Name: "a"}, {Name: "b", DependsOn: []string{"a"}}},
		Units:    []Unit{{Name: "u1", Anchor: "b"}, {Name: "u2", Anchor: "u1", Above: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := w.Wave("u1"); got != 1 {
		t.Errorf("wave(u1) = %d, want 1 (same as anchor)", got)
	}
	if got, _ := w.Wave("u2"); got != 2 {
		t.Errorf("wave(u2) = %d, want 2", got)
	}
}

func TestDeepChainDoesNotRecurse(t *testing.T) {
	const n = 200000
	in := Input{Services: make([]Service, n)}
	for i := range in.Services {
		in.Services[i].Name = fmt.Sprintf("s%d", i)
		if i > 0 {
			in.Services[i].DependsOn = []string{fmt.Sprintf("s%d", i-1)}
		}
	}
	w, err := Compute(in)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := w.Wave(fmt.Sprintf("s%d", n-1)); got != n-1 {
		t.Fatalf("wave = %d, want %d", got, n-1)
	}
}
