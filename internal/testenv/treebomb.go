package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"sort"
	"strings"
	"testing"
)

// TreeBomb describes a git tree bomb: folders whose entries all point at the same folder below,
// so a handful of objects (a few KB) names Fanout^(Depth+1) files.
type TreeBomb struct {
	// Folder is where the bomb lies in the repository, e.g. "blocks/bomb".
	Folder string
	// Fanout is the number of entries of every folder of the bomb; Depth the number of folder
	// levels above its files.
	Fanout, Depth int
	// Leaf ends the names of the files at the bottom (f0<Leaf>, f1<Leaf>, ...); Content is theirs.
	Leaf, Content string
	// Files are ordinary files (slash path → content) beside the bomb.
	Files map[string]string
}

// Paths is the number of files the bomb names.
func (b TreeBomb) Paths() int {
	n := b.Fanout
	for range b.Depth {
		n *= b.Fanout
	}
	return n
}

// PushTreeBomb writes the objects of b into the bare repository bare, commits them on branch
// (replacing what it held) and returns the commit's SHA. Only git plumbing is used: no work
// tree ever holds the bomb's files.
func PushTreeBomb(t testing.TB, bare, branch string, b TreeBomb) string {
	t.Helper()
	blob := gitStdin(t, bare, b.Content, "hash-object", "-w", "--stdin")
	var lines []string
	for i := range b.Fanout {
		lines = append(lines, fmt.Sprintf("100644 blob %s\tf%d%s", blob, i, b.Leaf))
	}
	tree := mktree(t, bare, lines)
	for range b.Depth {
		lines = lines[:0]
		for i := range b.Fanout {
			lines = append(lines, fmt.Sprintf("040000 tree %s\td%d", tree, i))
		}
		tree = mktree(t, bare, lines)
	}
	root := &dirNode{}
	root.put(strings.Split(strings.Trim(b.Folder, "/"), "/"), "040000 tree "+tree)
	for p, content := range b.Files {
		h := gitStdin(t, bare, content, "hash-object", "-w", "--stdin")
		root.put(strings.Split(path.Clean(p), "/"), "100644 blob "+h)
	}
	top := root.write(t, bare)
	commit := gitStdin(t, bare, "tree bomb\n", "commit-tree", top)
	Git(t, bare, "update-ref", "refs/heads/"+branch, commit)
	return commit
}

// dirNode is a folder of the commit PushTreeBomb builds: entries already stored ("mode type
// hash") and sub-folders to write.
type dirNode struct {
	stored map[string]string
	dirs   map[string]*dirNode
}

func (d *dirNode) put(segs []string, entry string) {
	if len(segs) == 1 {
		if d.stored == nil {
			d.stored = map[string]string{}
		}
		d.stored[segs[0]] = entry
		return
	}
	if d.dirs == nil {
		d.dirs = map[string]*dirNode{}
	}
	sub := d.dirs[segs[0]]
	if sub == nil {
		sub = &dirNode{}
		d.dirs[segs[0]] = sub
	}
	sub.put(segs[1:], entry)
}

func (d *dirNode) write(t testing.TB, bare string) string {
	var lines []string
	for name, e := range d.stored {
		lines = append(lines, e+"\t"+name)
	}
	for name, sub := range d.dirs {
		lines = append(lines, "040000 tree "+sub.write(t, bare)+"\t"+name)
	}
	sort.Strings(lines)
	return mktree(t, bare, lines)
}

func mktree(t testing.TB, bare string, lines []string) string {
	t.Helper()
	return gitStdin(t, bare, strings.Join(lines, "\n")+"\n", "mktree")
}

// gitStdin runs git in dir with stdin and the test identity, failing the test on error, and
// returns its trimmed output.
func gitStdin(t testing.TB, dir, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_TERMINAL_PROMPT=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return strings.TrimSpace(string(out))
}
