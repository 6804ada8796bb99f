// Package repo gives the wave tools one view of a GitOps repository, either its working tree on
// disk or the tree of a git commit held in memory, and builds kustomizations from it.
package repo

import (
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Layout names the folders of a repository, relative to its root.
type Layout struct {
	// Catalog holds the ServiceDefinitions and the extra units ("catalog").
	Catalog string
	// Apps holds the app-tier manifests, flat or in wave folders ("apps").
	Apps string
	// Clusters holds base/ and one folder per environment ("clusters").
	Clusters string
}

// DefaultLayout is the layout of the seed's repository.
var DefaultLayout = Layout{Catalog: "catalog", Apps: "apps", Clusters: "clusters"}

// Repo is a repository tree.
type Repo struct {
	// FS holds the tree.
	FS filesys.FileSystem
	// Root is the repository root on FS.
	Root string
	// Layout names its folders.
	Layout Layout
	// Label says where the tree came from, for messages.
	Label string
}

// OnDisk opens a working tree.
func OnDisk(dir string, l Layout) (*Repo, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("resolve repository folder %s: %w", dir, err)
	}
	fs := filesys.MakeFsOnDisk()
	if !fs.IsDir(abs) {
		return nil, fmt.Errorf("repository folder %s does not exist", dir)
	}
	return &Repo{FS: fs, Root: abs, Layout: l, Label: "working tree"}, nil
}

// AtRef loads the tree of ref (a branch, tag, or commit) of the git repository containing dir
// into memory.
func AtRef(dir, ref string, l Layout) (*Repo, error) {
	g, err := git.PlainOpenWithOptions(dir, &git.PlainOpenOptions{DetectDotGit: true})
	if err != nil {
		return nil, fmt.Errorf("open git repository at %s: %w", dir, err)
	}
	h, err := g.ResolveRevision(plumbing.Revision(ref))
	if err != nil {
		return nil, fmt.Errorf("resolve git ref %q: %w", ref, err)
	}
	c, err := g.CommitObject(*h)
	if err != nil {
		return nil, fmt.Errorf("read commit %s: %w", h, err)
	}
	tree, err := c.Tree()
	if err != nil {
		return nil, fmt.Errorf("read tree of %s: %w", h, err)
	}
	// Only the part of the tree below dir matters when dir is a sub-folder of the repository.
	wt, err := g.Worktree()
	if err != nil {
		return nil, fmt.Errorf("find the work tree of %s: %w", dir, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(wt.Filesystem.Root(), abs)
	if err != nil {
		return nil, fmt.Errorf("place %s in its repository: %w", dir, err)
	}
	if prefix := filepath.ToSlash(rel); prefix != "." {
		if tree, err = tree.Tree(prefix); err != nil {
			return nil, fmt.Errorf("folder %s is not in commit %s: %w", prefix, h, err)
		}
	}
	fs := filesys.MakeFsInMemory()
	err = tree.Files().ForEach(func(f *object.File) error {
		r, err := f.Reader()
		if err != nil {
			return err
		}
		defer r.Close()
		data, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		p := "/" + f.Name
		if err := fs.MkdirAll(path.Dir(p)); err != nil {
			return err
		}
		return fs.WriteFile(p, data)
	})
	if err != nil {
		return nil, fmt.Errorf("load tree of %s: %w", ref, err)
	}
	return &Repo{FS: fs, Root: "/", Layout: l, Label: ref}, nil
}

// Path joins elements below the repository root.
func (r *Repo) Path(elem ...string) string {
	return filepath.Join(append([]string{r.Root}, elem...)...)
}

// Rel returns p relative to the root, with forward slashes.
func (r *Repo) Rel(p string) string {
	rel, err := filepath.Rel(r.Root, p)
	if err != nil {
		return p
	}
	return filepath.ToSlash(rel)
}

// Exists reports whether the path below the root exists.
func (r *Repo) Exists(elem ...string) bool { return r.FS.Exists(r.Path(elem...)) }

// Build runs kustomize on the folder below the root.
func (r *Repo) Build(elem ...string) (resmap.ResMap, error) {
	o := krusty.MakeDefaultOptions()
	m, err := krusty.MakeKustomizer(o).Run(r.FS, r.Path(elem...))
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s (%s): %w", path.Join(elem...), r.Label, err)
	}
	return m, nil
}

// AppFiles lists the app manifests: files directly in the apps folder and in its sub-folders
// (one level), keyed by file name, valued by the path relative to the apps folder. Kustomization
// files are not app manifests. Two files with the same name are an error because placement is by
// name.
func (r *Repo) AppFiles() (map[string]string, error) {
	apps := r.Path(r.Layout.Apps)
	out := map[string]string{}
	if !r.FS.IsDir(apps) {
		return out, nil
	}
	var dup []string
	var walk func(dir, rel string, depth int) error
	walk = func(dir, rel string, depth int) error {
		names, err := r.FS.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("list %s: %w", r.Rel(dir), err)
		}
		sort.Strings(names)
		for _, n := range names {
			p, rp := filepath.Join(dir, n), path.Join(rel, n)
			if r.FS.IsDir(p) {
				if depth == 0 {
					if err := walk(p, rp, 1); err != nil {
						return err
					}
				}
				continue
			}
			if !IsManifest(n) || IsKustomization(n) {
				continue
			}
			if prev, ok := out[n]; ok {
				dup = append(dup, fmt.Sprintf("%s and %s", prev, rp))
				continue
			}
			out[n] = rp
		}
		return nil
	}
	if err := walk(apps, "", 0); err != nil {
		return nil, err
	}
	if len(dup) > 0 {
		return nil, errors.New("the same file name appears twice under " + r.Layout.Apps + " (placement is by name): " + strings.Join(dup, ", "))
	}
	return out, nil
}

// IsManifest reports whether a file name is a YAML manifest.
func IsManifest(name string) bool {
	return strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")
}

// IsKustomization reports whether a file name is a kustomization file.
func IsKustomization(name string) bool {
	switch name {
	case "kustomization.yaml", "kustomization.yml", "Kustomization":
		return true
	}
	return false
}

// Environments lists the folders under clusters/ other than base that hold a kustomization.
func (r *Repo) Environments() ([]string, error) {
	dir := r.Path(r.Layout.Clusters)
	names, err := r.FS.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", r.Layout.Clusters, err)
	}
	var out []string
	for _, n := range names {
		if n == "base" || !r.FS.IsDir(filepath.Join(dir, n)) {
			continue
		}
		if r.FS.Exists(filepath.Join(dir, n, "kustomization.yaml")) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out, nil
}
