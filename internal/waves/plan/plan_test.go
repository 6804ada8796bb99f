package plan

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/siteops/siteops/internal/waves/catalog"
)

func load(t testing.TB) *catalog.Catalog {
	t.Helper()
	c, err := catalog.LoadDir(filesys.MakeFsOnDisk(), filepath.Join("..", "testdata", "homelab", "catalog"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func present(files ...string) map[string]string {
	m := map[string]string{}
	for _, f := range files {
		m[f] = f
	}
	return m
}

func TestNonGatingUnitGetsItsOwnKustomization(t *testing.T) {
	c := load(t)
	c.Units[0].NonGating = true
	w, err := c.Waves()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Make(c, w, present("gitea.yaml", "sonarr.yaml", "seerr.yaml", "gitea-actions.yaml", "gitea-actions-runner-secret.sops.yaml"), DefaultOptions)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range p.Groups {
		names = append(names, g.Name+"<-"+strings.Join(g.DependsOn, ","))
	}
	want := []string{"apps-wave-0<-platform-config", "apps-wave-1<-apps-wave-0", "apps-wave-2<-apps-wave-1", "apps-wave-1-gitea-actions<-apps-wave-0"}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("groups %v, want %v", names, want)
	}
	g, _ := p.GroupOf("gitea-actions.yaml")
	if !g.NonGating || g.Dir != "wave-1-gitea-actions" {
		t.Fatalf("gitea-actions group %+v", g)
	}
	for _, g := range p.Groups {
		if slices.Contains(g.DependsOn, "apps-wave-1-gitea-actions") {
			t.Fatalf("%s depends on the non-gating unit", g.Name)
		}
	}
}

func TestWaveGapsChainToTheNearestLowerWave(t *testing.T) {
	c := load(t)
	w, err := c.Waves()
	if err != nil {
		t.Fatal(err)
	}
	// No wave-1 service is onboarded: wave 2 must wait for wave 0, not a missing wave 1.
	p, err := Make(c, w, present("jackett.yaml", "seerr.yaml"), DefaultOptions)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Groups) != 2 || p.Groups[1].Name != "apps-wave-2" || strings.Join(p.Groups[1].DependsOn, ",") != "apps-wave-0" {
		t.Fatalf("groups %+v", p.Groups)
	}
}

func TestConflictingClaim(t *testing.T) {
	c := load(t)
	c.Units[0].Files = append(c.Units[0].Files, "gitea.yaml")
	w, err := c.Waves()
	if err != nil {
		t.Fatal(err)
	}
	_, err = Make(c, w, present("gitea.yaml"), DefaultOptions)
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.File != "gitea.yaml" {
		t.Fatalf("error %v, want a conflict on gitea.yaml", err)
	}
}

// randomCatalog is a random DAG of n services; a tenth have a database.
func randomCatalog(n int) (*catalog.Catalog, map[string]string) {
	r := rand.New(rand.NewPCG(7, 7))
	c := &catalog.Catalog{Services: map[string]*catalog.ServiceDefinition{}, Files: map[string]string{}}
	files := map[string]string{}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("svc-%05d", i)
		s := &catalog.ServiceDefinition{Name: name}
		seen := map[string]bool{}
		for k := r.IntN(5); k > 0 && i > 0; k-- {
			d := fmt.Sprintf("svc-%05d", r.IntN(i))
			if !seen[d] {
				seen[d] = true
				s.Dependencies = append(s.Dependencies, catalog.Dependency{To: d})
			}
		}
		files[name+".yaml"] = name + ".yaml"
		if i%10 == 0 {
			s.Database = &catalog.Database{Size: "1Gi"}
			files[name+"-db.yaml"] = name + "-db.yaml"
			files[name+"-db-app.sops.yaml"] = name + "-db-app.sops.yaml"
		}
		c.Services[name] = s
	}
	return c, files
}

// BenchmarkComputeAndPlan10k is the speed goal: a random DAG of 10 000 services,
// waves computed and files planned, in at most 100 ms.
func BenchmarkComputeAndPlan10k(b *testing.B) {
	c, files := randomCatalog(10000)
	b.ReportAllocs()
	// The machine is shared: CPU time per operation is reported besides wall time.
	start := cpuTime(b)
	for b.Loop() {
		w, err := c.Waves()
		if err != nil {
			b.Fatal(err)
		}
		p, err := Make(c, w, files, DefaultOptions)
		if err != nil {
			b.Fatal(err)
		}
		if len(p.Placement) != len(files) {
			b.Fatalf("placed %d of %d files", len(p.Placement), len(files))
		}
	}
	b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the process's user plus system CPU time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestByServiceWaitsForExactDependencies(t *testing.T) {
	c := load(t)
	w, err := c.Waves()
	if err != nil {
		t.Fatal(err)
	}
	// keycloak-db, qbittorrent and radarr have no files: keycloak, sonarr and seerr look through
	// them to what they need in turn.
	p, err := Make(c, w, present("keycloak.yaml", "jackett.yaml", "sonarr.yaml", "seerr.yaml", "gitea.yaml", "gitea-actions.yaml", "nextcloud-db.yaml", "nextcloud-db-app.sops.yaml", "nextcloud.yaml"),
		Options{Prefix: "apps", Root: "platform-config", Granularity: ByService})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, g := range p.Groups {
		got = append(got, fmt.Sprintf("%s(w%d,%s,%s)<-%s", g.Name, g.Wave, g.Dir, strings.Join(g.Files, "+"), strings.Join(g.DependsOn, ",")))
	}
	want := []string{
		"apps-gitea(w0,gitea,gitea.yaml)<-platform-config",
		"apps-jackett(w0,jackett,jackett.yaml)<-platform-config",
		"apps-nextcloud-db(w0,nextcloud-db,nextcloud-db-app.sops.yaml+nextcloud-db.yaml)<-platform-config",
		"apps-gitea-actions(w1,gitea-actions,gitea-actions.yaml)<-apps-gitea",
		"apps-keycloak(w1,keycloak,keycloak.yaml)<-platform-config",
		"apps-nextcloud(w1,nextcloud,nextcloud.yaml)<-apps-nextcloud-db",
		"apps-sonarr(w1,sonarr,sonarr.yaml)<-apps-jackett",
		"apps-seerr(w2,seerr,seerr.yaml)<-apps-jackett,apps-sonarr", // radarr is looked through to jackett
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("groups\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if p.Granularity != ByService || len(p.Placement) != 9 {
		t.Fatalf("granularity %q, %d files placed", p.Granularity, len(p.Placement))
	}
	if ws := p.Waves(); strings.Join(ws[1], ",") != "gitea-actions.yaml,keycloak.yaml,nextcloud.yaml,sonarr.yaml" {
		t.Fatalf("wave 1 files %v", ws[1])
	}
}
