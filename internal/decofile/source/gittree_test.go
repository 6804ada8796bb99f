package source

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/memory"
)

// wrappedEOFStorer is a storer whose objects' readers report their end with a wrapped io.EOF,
// as a reader layered over another may.
type wrappedEOFStorer struct{ storer.EncodedObjectStorer }

func (s wrappedEOFStorer) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	obj, err := s.EncodedObjectStorer.EncodedObject(t, h)
	if err != nil {
		return nil, err
	}
	return wrappedEOFObject{obj}, nil
}

type wrappedEOFObject struct{ plumbing.EncodedObject }

func (o wrappedEOFObject) Reader() (io.ReadCloser, error) {
	rc, err := o.EncodedObject.Reader()
	if err != nil {
		return nil, err
	}
	return wrappedEOFReader{rc}, nil
}

type wrappedEOFReader struct{ io.ReadCloser }

func (r wrappedEOFReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) {
		err = fmt.Errorf("read object: %w", err)
	}
	return n, err
}

// storeObject encodes what encode writes as an object of type t in s and returns its hash.
func storeObject(t *testing.T, s storer.EncodedObjectStorer, typ plumbing.ObjectType, encode func(plumbing.EncodedObject) error) plumbing.Hash {
	t.Helper()
	obj := s.NewEncodedObject()
	obj.SetType(typ)
	if err := encode(obj); err != nil {
		t.Fatal(err)
	}
	h, err := s.SetEncodedObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// storeBlob stores content as a blob in st and returns its hash.
func storeBlob(t *testing.T, st *memory.Storage, content string) plumbing.Hash {
	t.Helper()
	return storeObject(t, st, plumbing.BlobObject, func(o plumbing.EncodedObject) error {
		w, err := o.Writer()
		if err != nil {
			return err
		}
		if _, err := io.WriteString(w, content); err != nil {
			return err
		}
		return w.Close()
	})
}

// TestGitTreeWrappedEOF: a folder whose object reader reports its end with a wrapped io.EOF is
// read to its end, not refused as malformed.
func TestGitTreeWrappedEOF(t *testing.T) {
	st := memory.NewStorage()
	blob := storeBlob(t, st, `{"ok":true}`)
	sub := storeObject(t, st, plumbing.TreeObject, (&object.Tree{Entries: []object.TreeEntry{{Name: "a.json", Mode: filemode.Regular, Hash: blob}}}).Encode)
	root := storeObject(t, st, plumbing.TreeObject, (&object.Tree{Entries: []object.TreeEntry{{Name: "b", Mode: filemode.Dir, Hash: sub}}}).Encode)

	blocks, err := extractCommit(context.Background(), wrappedEOFStorer{st}, plumbing.ZeroHash, root, "b", Limits{})
	if err != nil {
		t.Fatalf("extract from folders whose readers wrap io.EOF: %v", err)
	}
	if got := string(blocks["a"]); got != `{"ok":true}` {
		t.Fatalf("block a = %q, want the file's content (blocks %v)", got, blocks)
	}
}

// errDiskRead is the failure of a read of an object, as a failing disk would report it.
var errDiskRead = errors.New("read /tmp/decofile-git-1/repo.git/objects/pack/pack-1.pack: input/output error")

// cutStorer is a storer whose folders' object readers end after their first n bytes with err.
type cutStorer struct {
	storer.EncodedObjectStorer
	n   int64
	err error
}

func (s cutStorer) EncodedObject(t plumbing.ObjectType, h plumbing.Hash) (plumbing.EncodedObject, error) {
	obj, err := s.EncodedObjectStorer.EncodedObject(t, h)
	if err != nil || t != plumbing.TreeObject {
		return obj, err
	}
	return cutObject{obj, s.n, s.err}, nil
}

type cutObject struct {
	plumbing.EncodedObject
	n   int64
	err error
}

func (o cutObject) Reader() (io.ReadCloser, error) {
	rc, err := o.EncodedObject.Reader()
	if err != nil {
		return nil, err
	}
	return &cutReader{rc: rc, r: io.LimitReader(rc, o.n), err: o.err}, nil
}

type cutReader struct {
	rc  io.ReadCloser
	r   io.Reader
	err error
}

func (r *cutReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if errors.Is(err, io.EOF) {
		err = r.err
	}
	return n, err
}

func (r *cutReader) Close() error { return r.rc.Close() }

// TestGitTreeReadFailure: a folder whose object fails to read partway through an entry is
// reported as a failed read of that object, with the read's error, not as a malformed folder;
// a folder whose object ends there is malformed.
func TestGitTreeReadFailure(t *testing.T) {
	st := memory.NewStorage()
	blob := storeBlob(t, st, `{"ok":true}`)
	// One entry: "100644 a.json\x00" and 20 bytes of object id.
	root := storeObject(t, st, plumbing.TreeObject, (&object.Tree{Entries: []object.TreeEntry{{Name: "a.json", Mode: filemode.Regular, Hash: blob}}}).Encode)
	for _, c := range []struct {
		name string
		n    int64
	}{{"in the mode", 3}, {"in the name", 10}, {"in the object id", 20}} {
		t.Run(c.name, func(t *testing.T) {
			_, err := extractCommit(context.Background(), cutStorer{st, c.n, errDiskRead}, plumbing.ZeroHash, root, "", Limits{})
			e := AsError(err)
			if !errors.Is(err, errDiskRead) || e.Reason != ReasonInvalidArchive || e.Transient {
				t.Fatalf("extract from a folder whose read fails after %d bytes = %v (reason %q, transient %t), want the read's error, %s, not transient", c.n, err, e.Reason, e.Transient, ReasonInvalidArchive)
			}
			for _, want := range []string{"read folder " + root.String(), "failed to read partway", "check the disk"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "malformed") {
				t.Errorf("a failed read is reported as a malformed folder: %v", err)
			}

			_, err = extractCommit(context.Background(), cutStorer{st, c.n, io.EOF}, plumbing.ZeroHash, root, "", Limits{})
			if e := AsError(err); e.Reason != ReasonInvalidArchive || e.Transient || !strings.Contains(err.Error(), "is malformed") {
				t.Errorf("extract from a folder whose object ends after %d bytes = %v, want a malformed folder", c.n, err)
			}
		})
	}
}
