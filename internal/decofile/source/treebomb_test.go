package source

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"testing/fstest"
	"time"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// treeBombRepo is a real git remote on loopback whose main holds b/a.json and, under b/bomb, a
// tree bomb of fanout^(depth+1) files named *.txt made of a few KB of objects.
func treeBombRepo(t *testing.T, fanout, depth int) (url, sha string, paths int) {
	t.Helper()
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	url, err := remote.CreateRepo("bomb", "main")
	if err != nil {
		t.Fatal(err)
	}
	b := testenv.TreeBomb{Folder: "b/bomb", Fanout: fanout, Depth: depth, Leaf: ".txt", Content: "x\n", Files: map[string]string{"b/a.json": `{"ok":true}`}}
	return url, testenv.PushTreeBomb(t, remote.RepoDir("bomb"), "main", b), b.Paths()
}

// allocatedBytes is the total of heap allocations so far: it only grows, so a difference bounds
// what was allocated in between (and so the heap's growth), garbage included.
func allocatedBytes() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.TotalAlloc
}

// TestGitTreeBombBounded: a block folder holding a tree bomb (folders pointing 8 times at the
// folder below, 7 levels: 2 097 152 paths from a few KB of objects) is refused at the
// tree-entry limit while it is walked, naming the flag, allocating a bounded amount.
func TestGitTreeBombBounded(t *testing.T) {
	url, sha, paths := treeBombRepo(t, 8, 6)
	g := newGit(local, 30*time.Second, Limits{})
	runtime.GC()
	before := allocatedBytes()
	start := time.Now()
	_, err := g.Fetch(context.Background(), url, "main", sha, "b", nil)
	took, grew := time.Since(start), allocatedBytes()-before
	t.Logf("%d paths: %v after %s, %d KiB allocated", paths, err, took.Round(time.Millisecond), grew>>10)
	wantReason(t, err, ReasonLimitExceeded, "tree entries", "--decofile-max-tree-entries")
	const bound = 64 << 20
	if grew > bound {
		t.Fatalf("allocated %d MiB while refusing the tree bomb; want at most %d MiB", grew>>20, bound>>20)
	}
}

// TestGitTreeBombHeldToTimeout: with limits too high to stop it, a tree bomb of 16 folders per
// level (268 435 456 paths) is walked only until the source timeout, which ends the walk with
// the timeout named; the walk checks the deadline, not only the network does.
func TestGitTreeBombHeldToTimeout(t *testing.T) {
	url, sha, paths := treeBombRepo(t, 16, 6)
	g := newGit(local, 2*time.Second, Limits{DecompressedBytes: 1 << 50, Entries: 1 << 50})
	start := time.Now()
	_, err := g.Fetch(context.Background(), url, "main", sha, "b", nil)
	took := time.Since(start)
	t.Logf("%d paths: %v after %s", paths, err, took.Round(time.Millisecond))
	wantReason(t, err, ReasonUnavailable, "folders of commit", "--source-timeout")
	if took > 10*time.Second {
		t.Fatalf("the walk went on for %s with a 2s timeout", took)
	}
}

// TestGitDeepFoldersBounded: a chain of 70 nested folders under the block folder (a few bytes
// each in a pack) is refused at the depth bound instead of being followed down.
func TestGitDeepFoldersBounded(t *testing.T) {
	url, sha, _ := treeBombRepo(t, 1, 70)
	_, err := newGit(local, 30*time.Second, Limits{}).Fetch(context.Background(), url, "main", sha, "b", nil)
	wantReason(t, err, ReasonLimitExceeded, "more than 64 levels")
}

// TestExtractFSEntriesBounded: a folder on disk holding more files and folders than the entry
// limit is refused, naming the limit, whatever the files are.
func TestExtractFSEntriesBounded(t *testing.T) {
	fsys := fstest.MapFS{"b/a.json": {Data: []byte(`{}`)}}
	for i := range 20 {
		fsys[fmt.Sprintf("b/assets/%d.png", i)] = &fstest.MapFile{Data: []byte("x")}
	}
	_, err := ExtractFS(fsys, "b", Limits{Entries: 10})
	wantReason(t, err, ReasonLimitExceeded, "more than 10 files and folders", "--decofile-max-tree-entries")
	if _, err := ExtractFS(fsys, "b", Limits{Entries: 30}); err != nil {
		t.Fatalf("within the limit: %v", err)
	}
}
