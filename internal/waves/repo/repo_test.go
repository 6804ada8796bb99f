package repo

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5"

	"github.com/siteops/siteops/internal/waves/wavestest"
)

// A repository folder below the git root (a monorepo) reads the same at a ref as on disk.
func TestAtRefInSubfolder(t *testing.T) {
	root := t.TempDir()
	if _, err := git.PlainInit(root, false); err != nil {
		t.Fatal(err)
	}
	wavestest.WriteFile(t, root, "gitops/apps/kustomization.yaml", "resources:\n- a.yaml\n")
	wavestest.WriteFile(t, root, "gitops/apps/a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n")
	wavestest.WriteFile(t, root, "README.md", "x")
	wavestest.Commit(t, root, "c")
	// Changed after the commit: the ref must not see it.
	wavestest.WriteFile(t, root, "gitops/apps/a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n")

	r, err := AtRef(filepath.Join(root, "gitops"), "HEAD", DefaultLayout)
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.Build("apps")
	if err != nil {
		t.Fatal(err)
	}
	if m.Size() != 1 || m.Resources()[0].GetName() != "a" {
		t.Fatalf("built %d resources (%v), want the committed ConfigMap a", m.Size(), m.Resources())
	}
	if r.Exists("README.md") {
		t.Error("the tree above the repository folder leaked in")
	}
	disk, err := OnDisk(filepath.Join(root, "gitops"), DefaultLayout)
	if err != nil {
		t.Fatal(err)
	}
	m, err = disk.Build("apps")
	if err != nil || m.Resources()[0].GetName() != "b" {
		t.Fatalf("working tree build: %v", err)
	}
}

func TestAtRefUnknownRef(t *testing.T) {
	root := t.TempDir()
	if _, err := git.PlainInit(root, false); err != nil {
		t.Fatal(err)
	}
	wavestest.WriteFile(t, root, "x", "x")
	wavestest.Commit(t, root, "c")
	if _, err := AtRef(root, "no-such-branch", DefaultLayout); err == nil || !strings.Contains(err.Error(), `resolve git ref "no-such-branch"`) {
		t.Fatalf("error %v", err)
	}
}

func TestAppFilesRejectsDuplicateNames(t *testing.T) {
	dir := t.TempDir()
	wavestest.WriteFile(t, dir, "apps/wave-0/a.yaml", "x")
	wavestest.WriteFile(t, dir, "apps/wave-1/a.yaml", "x")
	wavestest.WriteFile(t, dir, "apps/wave-1/kustomization.yaml", "x")
	r, err := OnDisk(dir, DefaultLayout)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.AppFiles(); err == nil || !strings.Contains(err.Error(), "wave-0/a.yaml and wave-1/a.yaml") {
		t.Fatalf("error %v", err)
	}
}

func TestAppFiles(t *testing.T) {
	dir := t.TempDir()
	wavestest.WriteFile(t, dir, "apps/a.yaml", "x")
	wavestest.WriteFile(t, dir, "apps/kustomization.yaml", "x")
	wavestest.WriteFile(t, dir, "apps/wave-1/b.sops.yaml", "x")
	wavestest.WriteFile(t, dir, "apps/wave-1/deep/c.yaml", "x")
	wavestest.WriteFile(t, dir, "apps/README.md", "x")
	r, _ := OnDisk(dir, DefaultLayout)
	got, err := r.AppFiles()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["a.yaml"] != "a.yaml" || got["b.sops.yaml"] != "wave-1/b.sops.yaml" {
		t.Fatalf("app files %v", got)
	}
}
