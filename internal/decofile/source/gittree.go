package source

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// maxFolderDepth bounds how deep folders nest under the block folder: the walk recurses once per
// level, and a chain of folders costs a few bytes each in a pack.
const maxFolderDepth = 64

// gitTree walks the tree of one commit for the block files under the collector's folder, depth
// first, one folder at a time, listing nothing ahead: a tree bomb (folders that point many times
// at the same folder below, millions of paths from a few KB of objects) costs at most the
// limits. Every entry read counts against Limits.Entries, every folder's and block file's size
// against Limits.DecompressedBytes (checked before the object is read), and the context is
// checked at every entry.
type gitTree struct {
	ctx    context.Context
	s      storer.EncodedObjectStorer
	c      *collector
	commit plumbing.Hash
	// readers holds one buffered reader per folder depth, reused from folder to folder.
	readers []*bufio.Reader
	// sizes holds the size of each folder object looked up, for the folders met again.
	sizes map[plumbing.Hash]int64
}

// extractCommit reads the block files under folder from the tree treeHash of commit, within
// the limits and while ctx lasts (its error is returned as is when it ends the walk).
func extractCommit(ctx context.Context, s storer.EncodedObjectStorer, commit, treeHash plumbing.Hash, folder string, l Limits) (Blocks, error) {
	w := &gitTree{ctx: ctx, s: s, c: newCollector(folder, l), commit: commit, sizes: map[plumbing.Hash]int64{}}
	dir, tree := "", treeHash
	if w.c.prefix != "" {
		for _, seg := range strings.Split(w.c.prefix, "/") {
			sub, ok, err := w.find(tree, seg)
			if err != nil {
				return nil, err
			}
			if !ok {
				return w.c.result() // "no block files under <folder>"
			}
			tree = sub
		}
		dir = w.c.prefix
	}
	if err := w.walk(dir, tree, 0); err != nil {
		return nil, err
	}
	return w.c.result()
}

// errFound stops reading a folder once find has what it looks for.
var errFound = errors.New("found")

// find returns the sub-folder name of folder tree.
func (w *gitTree) find(tree plumbing.Hash, name string) (plumbing.Hash, bool, error) {
	var found plumbing.Hash
	err := w.each(tree, 0, func(n string, mode filemode.FileMode, h plumbing.Hash) error {
		if n == name && mode == filemode.Dir {
			found = h
			return errFound
		}
		return nil
	})
	if err != nil && !errors.Is(err, errFound) {
		return plumbing.ZeroHash, false, err
	}
	return found, !found.IsZero(), nil
}

// walk reads the block files of folder tree, whose path is dir, at depth below the block folder.
func (w *gitTree) walk(dir string, tree plumbing.Hash, depth int) error {
	if depth > maxFolderDepth {
		return &Error{Reason: ReasonLimitExceeded, Err: fmt.Errorf("folders under %q nest more than %d levels deep in commit %s", w.c.prefix, maxFolderDepth, w.commit)}
	}
	return w.each(tree, depth, func(name string, mode filemode.FileMode, h plumbing.Hash) error {
		p := name
		if dir != "" {
			p = dir + "/" + name
		}
		switch {
		case mode == filemode.Dir:
			return w.walk(p, h, depth+1)
		case mode != filemode.Regular && mode != filemode.Executable, !strings.HasSuffix(name, ".json"), !w.c.match(p):
			return nil
		}
		size, err := w.s.EncodedObjectSize(h)
		if err != nil {
			return &Error{Reason: ReasonInvalidArchive, Err: fmt.Errorf("read %s of commit %s: %w", p, w.commit, err)}
		}
		return w.c.add(p, size, func() (io.ReadCloser, error) {
			obj, err := w.s.EncodedObject(plumbing.BlobObject, h)
			if err != nil {
				return nil, err
			}
			return obj.Reader()
		})
	})
}

// each calls fn with every entry of folder tree, in the order stored, as they are read. The
// folder's size counts against the content limit before it is read, each entry against the
// entry limit; fn's error stops the reading and is returned.
func (w *gitTree) each(tree plumbing.Hash, depth int, fn func(name string, mode filemode.FileMode, h plumbing.Hash) error) error {
	size, ok := w.sizes[tree]
	if !ok {
		var err error
		if size, err = w.s.EncodedObjectSize(tree); err != nil {
			return &Error{Reason: ReasonInvalidArchive, Err: fmt.Errorf("read folder %s of commit %s: %w", tree, w.commit, err)}
		}
		w.sizes[tree] = size
	}
	if err := w.c.charge(size); err != nil {
		return err
	}
	obj, err := w.s.EncodedObject(plumbing.TreeObject, tree)
	if err != nil {
		return &Error{Reason: ReasonInvalidArchive, Err: fmt.Errorf("read folder %s of commit %s: %w", tree, w.commit, err)}
	}
	rc, err := obj.Reader()
	if err != nil {
		return &Error{Reason: ReasonInvalidArchive, Err: fmt.Errorf("read folder %s of commit %s: %w", tree, w.commit, err)}
	}
	defer func() { _ = rc.Close() }()
	r := w.reader(depth, rc)
	malformed := func(what string) error {
		return &Error{Reason: ReasonInvalidArchive, Err: fmt.Errorf("folder %s of commit %s is malformed: %s", tree, w.commit, what)}
	}
	// cut tells an entry the object's end cuts short (malformed) from a failed read of the object.
	cut := func(err error, what string) error {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return malformed(what)
		}
		return &Error{Reason: ReasonInvalidArchive, Err: fmt.Errorf("read folder %s of commit %s: its object failed to read partway: %w; "+
			"check the disk that holds the operator's temporary repositories, and the remote's repository with git fsck", tree, w.commit, err)}
	}
	for {
		if err := w.ctx.Err(); err != nil {
			return err
		}
		mode, err := r.ReadString(' ')
		if errors.Is(err, io.EOF) && mode == "" {
			return nil
		}
		if err != nil {
			return cut(err, "an entry has no mode")
		}
		fm, err := filemode.New(mode[:len(mode)-1])
		if err != nil {
			return malformed("an entry has an invalid mode")
		}
		name, err := r.ReadString(0)
		if err != nil {
			return cut(err, "an entry has no name")
		}
		name = name[:len(name)-1]
		if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
			return malformed(fmt.Sprintf("an entry is named %q", name))
		}
		var h plumbing.Hash
		if _, err := io.ReadFull(r, h[:]); err != nil {
			return cut(err, "an entry's object id is cut short")
		}
		if err := w.c.visit(); err != nil {
			return err
		}
		if err := fn(name, canonicalMode(fm), h); err != nil {
			return err
		}
	}
}

// reader returns the buffered reader of depth, reading r.
func (w *gitTree) reader(depth int, r io.Reader) *bufio.Reader {
	for len(w.readers) <= depth {
		w.readers = append(w.readers, nil)
	}
	if w.readers[depth] == nil {
		w.readers[depth] = bufio.NewReader(r)
	} else {
		w.readers[depth].Reset(r)
	}
	return w.readers[depth]
}

// canonicalMode maps the file modes old git versions wrote (100664 and the like) to the ones
// they mean, as git reads them.
func canonicalMode(m filemode.FileMode) filemode.FileMode {
	switch m & 0o170000 {
	case 0o040000:
		return filemode.Dir
	case 0o100000:
		if m&0o111 != 0 {
			return filemode.Executable
		}
		return filemode.Regular
	}
	return m
}
