package source

import (
	"context"
	"errors"
	"fmt"
	"io"
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

// TestGitTreeWrappedEOF: a folder whose object reader reports its end with a wrapped io.EOF is
// read to its end, not refused as malformed.
func TestGitTreeWrappedEOF(t *testing.T) {
	st := memory.NewStorage()
	blob := storeObject(t, st, plumbing.BlobObject, func(o plumbing.EncodedObject) error {
		w, err := o.Writer()
		if err != nil {
			return err
		}
		if _, err := io.WriteString(w, `{"ok":true}`); err != nil {
			return err
		}
		return w.Close()
	})
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
