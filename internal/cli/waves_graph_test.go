package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

func TestWavesGraphOutputs(t *testing.T) {
	dir := wavesFixture(t)
	out, err := wavesRun(t, "waves", "graph", "--repo", dir)
	if err != nil || !strings.HasPrefix(out, "digraph waves {") || !strings.Contains(out, `"nextcloud-db" -> "nextcloud";`) {
		t.Fatalf("dot: %v\n%s", err, out)
	}
	out, err = wavesRun(t, "waves", "graph", "--repo", dir, "-o", "mermaid")
	if err != nil || !strings.HasPrefix(out, "flowchart TB\n") || !strings.Contains(out, "n_gitea -.->|anchor, above| n_gitea_actions") {
		t.Fatalf("mermaid: %v\n%s", err, out)
	}
	out, err = wavesRun(t, "waves", "graph", "--catalog", filepath.Join(dir, "catalog"), "-o", "json")
	if err != nil {
		t.Fatal(err, out)
	}
	var g struct {
		Waves int `json:"waves"`
		Nodes []struct {
			Name string `json:"name"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(out), &g); err != nil || g.Waves != 3 || len(g.Nodes) != 16 {
		t.Fatalf("json: %v %+v", err, g)
	}
	if _, err := wavesRun(t, "waves", "graph", "--repo", dir, "-o", "png"); err == nil || !strings.Contains(err.Error(), "want dot, mermaid or json") {
		t.Fatalf("-o png: %v", err)
	}
}
