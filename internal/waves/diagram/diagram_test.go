package diagram_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/siteops/siteops/internal/waves"
	"github.com/siteops/siteops/internal/waves/diagram"
	"github.com/siteops/siteops/internal/waves/plan"
	"github.com/siteops/siteops/internal/waves/repo"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func homelab(t *testing.T) *diagram.Graph { return sample(t, "homelab") }

func sample(t *testing.T, name string) *diagram.Graph {
	t.Helper()
	r, err := repo.OnDisk(filepath.Join("..", "testdata", name), repo.DefaultLayout)
	if err != nil {
		t.Fatal(err)
	}
	s, err := waves.Load(r, plan.DefaultOptions)
	if err != nil {
		t.Fatal(err)
	}
	return diagram.New(s.Catalog, s.Waves, s.Plan)
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (run with -update after checking):\n%s", name, got)
	}
}

func TestGolden(t *testing.T) {
	for _, repo := range []string{"homelab", "shop"} {
		g := sample(t, repo)
		for ext, write := range map[string]func(*bytes.Buffer) error{
			".dot":  func(b *bytes.Buffer) error { return g.Dot(b) },
			".mmd":  func(b *bytes.Buffer) error { return g.Mermaid(b) },
			".json": func(b *bytes.Buffer) error { return g.JSON(b) },
		} {
			var b bytes.Buffer
			if err := write(&b); err != nil {
				t.Fatal(err)
			}
			golden(t, repo+ext, b.Bytes())
		}
	}
}

func TestGraphContent(t *testing.T) {
	g := homelab(t)
	if g.Waves != 3 || len(g.Nodes) != 16 {
		t.Fatalf("%d waves, %d nodes; want 3 and 16", g.Waves, len(g.Nodes))
	}
	nodes := map[string]diagram.Node{}
	for _, n := range g.Nodes {
		nodes[n.Name] = n
	}
	if n := nodes["gitea-actions"]; n.Kind != "unit" || !n.Above || n.Wave != 1 || n.Kustomization != "apps-wave-1" {
		t.Errorf("gitea-actions: %+v", n)
	}
	if n := nodes["keycloak"]; n.Placed || n.Kustomization != "" {
		t.Errorf("keycloak is not onboarded: %+v", n)
	}
	if n := nodes["nextcloud-db"]; n.Kind != "database" || !n.Placed || n.Kustomization != "apps-wave-0" {
		t.Errorf("nextcloud-db: %+v", n)
	}
	edges := map[diagram.Edge]bool{}
	for _, e := range g.Edges {
		edges[e] = true
	}
	for _, e := range []diagram.Edge{
		{From: "gitea", To: "gitea-actions", Kind: diagram.Anchor},
		{From: "nextcloud-db", To: "nextcloud", Kind: diagram.Dependency},
		{From: "radarr", To: "seerr", Kind: diagram.Dependency},
		{From: "keycloak-db", To: "keycloak", Kind: diagram.Dependency},
	} {
		if !edges[e] {
			t.Errorf("edge %+v missing", e)
		}
	}
	var back diagram.Graph
	var b bytes.Buffer
	if err := g.JSON(&b); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b.Bytes(), &back); err != nil || len(back.Edges) != len(g.Edges) {
		t.Fatalf("JSON does not round-trip: %v", err)
	}
}

// dotPath finds Graphviz. `make test` installs it (Makefile test-deps); a full run without it
// fails instead of skipping, so a missing renderer cannot hide a broken dot output.
func dotPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("dot")
	if err != nil {
		if testing.Short() {
			t.Skip("short mode: Graphviz's dot is not installed")
		}
		t.Fatal("Graphviz's `dot` is not installed: run `make test-deps` (Debian package graphviz) or `apt-get install graphviz`")
	}
	return p
}

func TestDotRendersWithGraphviz(t *testing.T) {
	dot := dotPath(t)
	for _, name := range []string{"homelab", "shop"} {
		renderWithDot(t, dot, sample(t, name))
	}
}

func renderWithDot(t *testing.T, dot string, g *diagram.Graph) {
	t.Helper()
	var src bytes.Buffer
	if err := g.Dot(&src); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, format := range []string{"svg", "png"} {
		out := filepath.Join(dir, "waves."+format)
		cmd := exec.Command(dot, "-T"+format, "-o", out)
		cmd.Stdin = bytes.NewReader(src.Bytes())
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("dot -T%s: %v: %s", format, err, stderr.String())
		}
		if stderr.Len() > 0 {
			t.Errorf("dot -T%s warns: %s", format, stderr.String())
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		switch format {
		case "svg":
			svg := string(data)
			for _, n := range g.Nodes {
				if !strings.Contains(svg, "<title>"+strings.ReplaceAll(n.Name, "-", "&#45;")+"</title>") {
					t.Errorf("the SVG has no node %s", n.Name)
				}
			}
			for wave := range g.Waves {
				if !strings.Contains(svg, fmt.Sprintf("<title>cluster_wave_%d</title>", wave)) {
					t.Errorf("the SVG has no cluster for wave %d", wave)
				}
			}
			for _, e := range g.Edges {
				title := strings.ReplaceAll(e.From+"->"+e.To, "-", "&#45;")
				if !strings.Contains(svg, "<title>"+strings.ReplaceAll(title, "&#45;>", "&#45;&gt;")+"</title>") {
					t.Errorf("the SVG has no edge %s -> %s", e.From, e.To)
				}
			}
		case "png":
			if !bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")) || len(data) < 1000 {
				t.Errorf("dot -Tpng wrote %d bytes that are not a PNG", len(data))
			}
		}
	}
}
