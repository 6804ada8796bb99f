package waves

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/siteops/siteops/internal/waves/catalog"
	"github.com/siteops/siteops/internal/waves/graph"
	"github.com/siteops/siteops/internal/waves/plan"
	"github.com/siteops/siteops/internal/waves/repo"
)

// State is a repository's catalog, its computed waves and the placement of its app files.
type State struct {
	Repo    *repo.Repo
	Catalog *catalog.Catalog
	Waves   *graph.Waves
	// Present maps each committed app file name to its path under apps/.
	Present map[string]string
	Plan    *plan.Plan
}

// Load reads the catalog of r, computes the waves and plans the committed app files. Without a
// granularity in o, the repository's layout decides (see Granularity).
func Load(r *repo.Repo, o plan.Options) (*State, error) {
	c, err := catalog.LoadDir(r.FS, r.Path(r.Layout.Catalog))
	if err != nil {
		return nil, fmt.Errorf("catalog (%s): %w", r.Label, err)
	}
	w, err := c.Waves()
	if err != nil {
		return nil, fmt.Errorf("compute waves (%s): %w", r.Label, err)
	}
	present, err := r.AppFiles()
	if err != nil {
		return nil, err
	}
	if o.Granularity == "" {
		o.Granularity = Granularity(r, w)
	}
	p, err := plan.Make(c, w, present, o)
	if err != nil {
		return nil, fmt.Errorf("plan (%s): %w", r.Label, err)
	}
	return &State{Repo: r, Catalog: c, Waves: w, Present: present, Plan: p}, nil
}

// Granularity tells the layout a repository uses: per service when the apps folder holds a
// folder named after a node with a kustomization.yaml in it (what `emit --granularity service`
// writes), by wave otherwise (also before the first emit, and with other sub-folders such as a
// shared kustomize component).
func Granularity(r *repo.Repo, w *graph.Waves) plan.Granularity {
	apps := r.Path(r.Layout.Apps)
	names, err := r.FS.ReadDir(apps)
	if err != nil {
		return plan.ByWave
	}
	for _, n := range names {
		if strings.HasPrefix(n, "wave-") || !w.Has(n) || !r.FS.IsDir(filepath.Join(apps, n)) {
			continue
		}
		if r.FS.Exists(filepath.Join(apps, n, "kustomization.yaml")) {
			return plan.ByService
		}
	}
	return plan.ByWave
}
