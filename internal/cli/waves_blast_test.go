package cli

import (
	"encoding/json"
	"strings"
	"testing"
)

// The seed's repository, counted by hand: jackett (wave 0) holds back the five placed wave-1
// nodes (keycloak is not onboarded) and seerr under the chain, but only sonarr, radarr and seerr
// depend on it.
func TestWavesBlast(t *testing.T) {
	dir := wavesFixture(t)
	out, err := wavesRun(t, "waves", "blast", "jackett", "--repo", dir)
	if err != nil {
		t.Fatal(err, out)
	}
	for _, want := range []string{
		"a failing jackett (wave 0, apps-wave-0) blocks:",
		"under the wave chain (this repository's layout): 6\n    wave 1: gitea-actions nextcloud radarr semaphore sonarr\n    wave 2: seerr\n",
		"under exact dependencies (--granularity service): 3\n    wave 1: radarr sonarr\n    wave 2: seerr\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("blast lacks %q:\n%s", want, out)
		}
	}
	out, err = wavesRun(t, "waves", "blast", "nextcloud-db", "--repo", dir, "-o", "json")
	if err != nil {
		t.Fatal(err, out)
	}
	var r struct {
		Chain, Exact []string
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil || len(r.Chain) != 6 || strings.Join(r.Exact, ",") != "nextcloud" {
		t.Fatalf("nextcloud-db: %v %+v", err, r)
	}
	if _, err := wavesRun(t, "waves", "blast", "nope", "--repo", dir); err == nil || !strings.Contains(err.Error(), "not a node") {
		t.Fatalf("unknown node: %v", err)
	}
}

func TestWavesPrintBlastColumn(t *testing.T) {
	dir := wavesFixture(t)
	out, err := wavesRun(t, "waves", "print", "--repo", dir)
	if err != nil {
		t.Fatal(err, out)
	}
	rows := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 3 {
			rows[f[1]] = f[3]
		}
	}
	for node, want := range map[string]string{"NODE": "BLAST", "jackett": "6/3", "gitea": "6/1", "sonarr": "1/1", "gitea-actions": "1/0", "seerr": "0/0"} {
		if rows[node] != want {
			t.Errorf("%s: blast %q, want %q\n%s", node, rows[node], want, out)
		}
	}
}
