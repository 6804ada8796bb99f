package gitwriter

import (
	"fmt"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/memory"
)

// objectStore is the writer's in-memory git storage. It notes the blobs a build adds so they
// can be dropped once the push is done or failed: the writer compares files by hash and never
// reads a blob back, and a retry builds them again from the pending changes. Without this, every
// failed push of new content would leave its blobs in memory for good.
//
// A fetched pack reaches the store through PackfileWriter, which bounds it by maxPackBytes and
// the inflated size of its objects by maxObjectBytes.
type objectStore struct {
	*memory.Storage
	tracking bool
	added    []plumbing.Hash
	// kept is how many objects the last trim kept.
	kept int

	maxPackBytes, maxObjectBytes int64
}

func newObjectStore(maxPackBytes, maxObjectBytes int64) *objectStore {
	return &objectStore{Storage: memory.NewStorage(), maxPackBytes: maxPackBytes, maxObjectBytes: maxObjectBytes}
}

// SetEncodedObject stores obj, noting a blob that was not stored yet while tracking.
func (s *objectStore) SetEncodedObject(obj plumbing.EncodedObject) (plumbing.Hash, error) {
	if s.tracking && obj.Type() == plumbing.BlobObject {
		if _, ok := s.Objects[obj.Hash()]; !ok {
			s.added = append(s.added, obj.Hash())
		}
	}
	return s.Storage.SetEncodedObject(obj)
}

// trim forgets every object but tip's commit and what its tree reaches, once the store holds
// more than twice what the last trim kept: the writer builds only on the tip, so the commits and
// trees of earlier pushes are never read again, and without this they stay until ReopenAfter
// objects were pushed (780 objects after 151 pushes in TestWriterForgetsEarlierPushes). tip
// becomes the shallow boundary, so a fetch tells the remote that history stops there.
func (s *objectStore) trim(tip plumbing.Hash) error {
	if tip.IsZero() || len(s.Objects) <= 2*s.kept+trimSlack {
		return nil
	}
	c, err := object.GetCommit(s, tip)
	if err != nil {
		return fmt.Errorf("read tip commit %s: %w", tip, err)
	}
	keep := map[plumbing.Hash]bool{tip: true}
	var walk func(plumbing.Hash) error
	walk = func(h plumbing.Hash) error {
		if keep[h] {
			return nil
		}
		keep[h] = true
		t, err := object.GetTree(s, h)
		if err != nil {
			return fmt.Errorf("read tree %s: %w", h, err)
		}
		for _, e := range t.Entries {
			if e.Mode == filemode.Dir {
				if err := walk(e.Hash); err != nil {
					return err
				}
			} else {
				keep[e.Hash] = true
			}
		}
		return nil
	}
	if err := walk(c.TreeHash); err != nil {
		return err
	}
	for h := range s.Objects {
		if !keep[h] {
			delete(s.Objects, h)
			delete(s.Commits, h)
			delete(s.Trees, h)
			delete(s.Blobs, h)
			delete(s.Tags, h)
		}
	}
	s.kept = len(s.Objects)
	return s.SetShallow([]plumbing.Hash{tip})
}

// trimSlack is how many objects beyond twice the last trim's the store may hold before the next.
const trimSlack = 256

// releaseBlobs forgets the blobs noted since the last call.
func (s *objectStore) releaseBlobs() {
	for _, h := range s.added {
		delete(s.Objects, h)
		delete(s.Blobs, h)
	}
	clear(s.added)
	s.added = s.added[:0]
}
