package gitwriter

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// treeIndex is an editable view of a git tree that loads folders lazily and writes back only the
// folders that changed. It lets the writer build commits straight from objects, without a
// worktree, so a batch of thousands of changes costs one pass over the folders it touches.
type treeIndex struct {
	s    storer.EncodedObjectStorer
	root *dirNode
	// written lists the trees stored by write, for the push.
	written []plumbing.Hash
}

type dirNode struct {
	hash    plumbing.Hash
	loaded  bool
	dirty   bool
	entries map[string]*treeEntry
}

type treeEntry struct {
	mode filemode.FileMode
	hash plumbing.Hash
	dir  *dirNode
}

func newTreeIndex(s storer.EncodedObjectStorer, root plumbing.Hash) *treeIndex {
	return &treeIndex{s: s, root: &dirNode{hash: root}}
}

func (ix *treeIndex) load(d *dirNode) error {
	if d.loaded {
		return nil
	}
	d.entries = map[string]*treeEntry{}
	d.loaded = true
	if d.hash.IsZero() {
		return nil
	}
	t, err := object.GetTree(ix.s, d.hash)
	if err != nil {
		return fmt.Errorf("read tree %s: %w", d.hash, err)
	}
	for _, e := range t.Entries {
		te := &treeEntry{mode: e.Mode, hash: e.Hash}
		if e.Mode == filemode.Dir {
			te.dir = &dirNode{hash: e.Hash}
		}
		d.entries[e.Name] = te
	}
	return nil
}

// walk returns the folders from the root to the parent of p's last segment. With create, missing
// folders (or files in the way) become folders.
func (ix *treeIndex) walk(p string, create bool) ([]*dirNode, string, error) {
	segs := strings.Split(p, "/")
	d := ix.root
	chain := []*dirNode{d}
	for _, seg := range segs[:len(segs)-1] {
		if err := ix.load(d); err != nil {
			return nil, "", err
		}
		e := d.entries[seg]
		if e == nil || e.dir == nil {
			if !create {
				return nil, "", nil
			}
			e = &treeEntry{mode: filemode.Dir, dir: &dirNode{loaded: true, entries: map[string]*treeEntry{}}}
			d.entries[seg] = e
		}
		d = e.dir
		chain = append(chain, d)
	}
	if err := ix.load(d); err != nil {
		return nil, "", err
	}
	return chain, segs[len(segs)-1], nil
}

// get returns the blob hash of the file at p.
func (ix *treeIndex) get(p string) (plumbing.Hash, bool, error) {
	chain, name, err := ix.walk(p, false)
	if err != nil || chain == nil {
		return plumbing.ZeroHash, false, err
	}
	e := chain[len(chain)-1].entries[name]
	if e == nil || e.dir != nil {
		return plumbing.ZeroHash, false, nil
	}
	return e.hash, true, nil
}

// set points the file at p to blob h.
func (ix *treeIndex) set(p string, h plumbing.Hash) error {
	chain, name, err := ix.walk(p, true)
	if err != nil {
		return err
	}
	chain[len(chain)-1].entries[name] = &treeEntry{mode: filemode.Regular, hash: h}
	for _, d := range chain {
		d.dirty = true
	}
	return nil
}

// remove deletes the file at p and reports whether it existed.
func (ix *treeIndex) remove(p string) (bool, error) {
	chain, name, err := ix.walk(p, false)
	if err != nil || chain == nil {
		return false, err
	}
	d := chain[len(chain)-1]
	if e := d.entries[name]; e == nil || e.dir != nil {
		return false, nil
	}
	delete(d.entries, name)
	for _, d := range chain {
		d.dirty = true
	}
	return true, nil
}

// files lists the file paths under folder dir, recursively, sorted. It looks at most
// maxEntries files and folders (a folder met twice counts twice: a tree bomb names millions of
// paths with a few objects) and maxSweepDepth levels; past either it returns a
// *folderTooLarge, and the folders it loaded are let go again.
func (ix *treeIndex) files(dir string, maxEntries int) ([]string, error) {
	chain, _, err := ix.walk(dir+"/x", false)
	if err != nil || chain == nil {
		return nil, err
	}
	top := chain[len(chain)-1]
	var out []string
	seen := 0
	var visit func(prefix string, d *dirNode, depth int) error
	visit = func(prefix string, d *dirNode, depth int) error {
		if depth > maxSweepDepth {
			return &folderTooLarge{dir: dir, what: fmt.Sprintf("its folders nest more than %d levels deep", maxSweepDepth)}
		}
		if err := ix.load(d); err != nil {
			return err
		}
		if seen += len(d.entries); seen > maxEntries {
			return &folderTooLarge{dir: dir, what: fmt.Sprintf("it holds more than %d files and folders (limit: %s)", maxEntries, FlagMaxSweepEntries)}
		}
		for n, e := range d.entries {
			if e.dir != nil {
				if err := visit(prefix+n+"/", e.dir, depth+1); err != nil {
					return err
				}
			} else {
				out = append(out, prefix+n)
			}
		}
		return nil
	}
	if err := visit(dir+"/", top, 0); err != nil {
		if !top.dirty {
			// Nothing below was changed: forget what the walk loaded, it is read again if needed.
			top.loaded, top.entries = false, nil
		}
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}

// write stores every changed folder and returns the root tree hash. Empty folders are dropped,
// as git cannot hold them.
func (ix *treeIndex) write() (plumbing.Hash, error) {
	h, _, err := ix.writeDir(ix.root)
	return h, err
}

func (ix *treeIndex) writeDir(d *dirNode) (plumbing.Hash, bool, error) {
	if !d.dirty {
		return d.hash, false, nil
	}
	t := &object.Tree{}
	for n, e := range d.entries {
		if e.dir != nil {
			h, empty, err := ix.writeDir(e.dir)
			if err != nil {
				return plumbing.ZeroHash, false, err
			}
			if empty {
				delete(d.entries, n)
				continue
			}
			e.hash = h
		}
		t.Entries = append(t.Entries, object.TreeEntry{Name: n, Mode: e.mode, Hash: e.hash})
	}
	sort.Sort(object.TreeEntrySorter(t.Entries))
	obj := ix.s.NewEncodedObject()
	if err := t.Encode(obj); err != nil {
		return plumbing.ZeroHash, false, fmt.Errorf("encode tree: %w", err)
	}
	h, err := ix.s.SetEncodedObject(obj)
	if err != nil {
		return plumbing.ZeroHash, false, fmt.Errorf("store tree: %w", err)
	}
	d.hash, d.dirty = h, false
	ix.written = append(ix.written, h)
	return h, len(t.Entries) == 0, nil
}
