package waves

import (
	"fmt"

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

// Load reads the catalog of r, computes the waves and plans the committed app files.
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
	p, err := plan.Make(c, w, present, o)
	if err != nil {
		return nil, fmt.Errorf("plan (%s): %w", r.Label, err)
	}
	return &State{Repo: r, Catalog: c, Waves: w, Present: present, Plan: p}, nil
}
