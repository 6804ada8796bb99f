// Package wavestest makes the git repositories the wave planner's tests work on: a copy of a
// testdata folder, committed, and edits to it.
package wavestest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// Repo copies the folder src into a new git repository in a temporary folder of t and commits
// it as msg.
func Repo(t testing.TB, src, msg string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	if _, err := git.PlainInit(dir, false); err != nil {
		t.Fatal(err)
	}
	Commit(t, dir, msg)
	return dir
}

// Commit stages every change in the repository at dir and commits it as msg, by the same author
// at the same time on every run (so commit IDs repeat); a commit of no change is allowed.
func Commit(t testing.TB, dir, msg string) {
	t.Helper()
	g, err := git.PlainOpen(dir)
	if err != nil {
		t.Fatal(err)
	}
	wt, err := g.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	if err := wt.AddWithOptions(&git.AddOptions{All: true}); err != nil {
		t.Fatal(err)
	}
	sig := &object.Signature{Name: "ops", Email: "ops@example.test", When: time.Unix(1700000000, 0)}
	if _, err := wt.Commit(msg, &git.CommitOptions{Author: sig, Committer: sig, AllowEmptyCommits: true}); err != nil {
		t.Fatal(err)
	}
}

// Edit replaces the first old in the file rel (slash-separated) of dir with new; the test fails
// when the file does not hold old.
func Edit(t testing.TB, dir, rel, old, new string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	data, err := os.ReadFile(p)
	if err != nil || !strings.Contains(string(data), old) {
		t.Fatalf("%s has no %q (%v)", rel, old, err)
	}
	if err := os.WriteFile(p, []byte(strings.Replace(string(data), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// WriteFile writes content to rel under dir, making the folders it needs.
func WriteFile(t testing.TB, dir, rel, content string) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
