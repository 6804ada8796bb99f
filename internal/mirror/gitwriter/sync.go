package gitwriter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/transport"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
)

// open clones the branch into memory, or starts an empty history when the branch does not exist.
func (w *Writer) open(ctx context.Context) error {
	st := newObjectStore(w.cfg.MaxFetchBytes, w.cfg.MaxFetchObjectBytes)
	repo, err := git.Init(st, nil)
	if err != nil {
		return fmt.Errorf("init in-memory repository: %w", err)
	}
	w.repo, w.store = repo, st
	if _, err := w.fetch(ctx); err != nil {
		return err
	}
	return nil
}

// reopen replaces the in-memory repository by a fresh depth-1 fetch, releasing every object
// the writer accumulated. On failure the current repository is kept.
func (w *Writer) reopen(ctx context.Context) {
	repo, store, tip := w.repo, w.store, w.tip
	if err := w.open(ctx); err != nil {
		logf.FromContext(ctx).Error(err, "refetch the repository to release memory; keeping the current one")
		w.repo, w.store, w.tip = repo, store, tip
		return
	}
	w.pushedObjects = 0
}

func (w *Writer) remoteRef() plumbing.ReferenceName {
	return plumbing.NewRemoteReferenceName("origin", w.cfg.Branch)
}

// fetch updates the remote-tracking branch and returns whether the remote tip differs from
// the writer's tip. A missing branch leaves the tip empty. Only the tip commit is fetched
// (depth 1): the writer only builds on the tip, so history is never needed in memory.
func (w *Writer) fetch(ctx context.Context) (bool, error) {
	ctx, ex, cancel := w.remote.begin(ctx)
	defer cancel()
	what := fmt.Sprintf("fetch %s from %s", w.cfg.Branch, w.remote.shown)
	sess, release, err := w.remote.uploadPack(ctx, ex)
	if err != nil {
		return false, w.remote.describe(ctx, ex, what, err)
	}
	defer release()
	ar, err := sess.AdvertisedReferencesContext(ctx)
	missing := errors.Is(err, transport.ErrEmptyRemoteRepository)
	if err != nil && !missing {
		return false, w.remote.describe(ctx, ex, what, err)
	}
	var tip plumbing.Hash
	if !missing {
		tip = w.advertisedTip(ar)
	}
	if tip.IsZero() {
		moved := !w.tip.IsZero()
		w.tip = plumbing.ZeroHash
		return moved, nil
	}
	if _, err := w.repo.Storer.EncodedObject(plumbing.CommitObject, tip); err != nil {
		req, err := shallowRequest(ar, tip, 1)
		if err != nil {
			return false, fmt.Errorf("%s: %w", what, err)
		}
		if _, err := w.repo.Storer.EncodedObject(plumbing.CommitObject, w.tip); !w.tip.IsZero() && err == nil {
			// The remote then sends only what changed since the writer's tip; the shallow lines
			// tell it where the writer's history stops, so it assumes nothing older is here.
			req.Haves = []plumbing.Hash{w.tip}
			if req.Shallows, err = w.repo.Storer.Shallow(); err != nil {
				return false, fmt.Errorf("read the shallow commits: %w", err)
			}
		}
		resp, err := sess.UploadPack(ctx, req)
		if err == nil {
			err = packfile.UpdateObjectStorage(w.repo.Storer, resp)
			_ = resp.Close()
		}
		if err != nil {
			return false, w.remote.describe(ctx, ex, what, err)
		}
		if err := w.addShallows(resp.Shallows); err != nil {
			return false, err
		}
		if _, err := w.repo.Storer.EncodedObject(plumbing.CommitObject, tip); err != nil {
			return false, &RemoteError{msg: fmt.Sprintf("%s: the remote did not send commit %s; retrying", what, tip)}
		}
	}
	if err := w.repo.Storer.SetReference(plumbing.NewHashReference(w.remoteRef(), tip)); err != nil {
		return false, fmt.Errorf("record fetched branch %s: %w", w.cfg.Branch, err)
	}
	moved := tip != w.tip
	w.tip = tip
	return moved, nil
}

// advertisedTip is the writer's branch among the advertised references; zero when the remote
// has no such branch.
func (w *Writer) advertisedTip(ar *packp.AdvRefs) plumbing.Hash {
	refs, err := ar.AllReferences()
	if err != nil {
		return plumbing.ZeroHash
	}
	ref, err := refs.Reference(plumbing.NewBranchReferenceName(w.cfg.Branch))
	if err != nil {
		return plumbing.ZeroHash
	}
	return ref.Hash()
}

// shallowRequest asks for tip and the depth-1 commits before it, without side bands: the
// remote's progress and messages are never read.
func shallowRequest(ar *packp.AdvRefs, tip plumbing.Hash, depth int) (*packp.UploadPackRequest, error) {
	req := packp.NewUploadPackRequestFromCapabilities(ar.Capabilities)
	req.Wants = []plumbing.Hash{tip}
	req.Depth = packp.DepthCommits(depth)
	if err := req.Capabilities.Set(capability.Shallow); err != nil {
		return nil, fmt.Errorf("request a shallow fetch: %w", err)
	}
	req.Capabilities.Delete(capability.Sideband64k)
	req.Capabilities.Delete(capability.Sideband)
	if ar.Capabilities.Supports(capability.NoProgress) {
		_ = req.Capabilities.Set(capability.NoProgress)
	}
	return req, nil
}

// addShallows records commits fetched without their parents.
func (w *Writer) addShallows(hs []plumbing.Hash) error {
	if len(hs) == 0 {
		return nil
	}
	known, err := w.repo.Storer.Shallow()
	if err != nil {
		return fmt.Errorf("read the shallow commits: %w", err)
	}
	for _, h := range hs {
		if !slices.Contains(known, h) {
			known = append(known, h)
		}
	}
	if err := w.repo.Storer.SetShallow(known); err != nil {
		return fmt.Errorf("record the shallow commits: %w", err)
	}
	return nil
}

// errRemoteMoved says the remote branch is not where the writer built on.
var errRemoteMoved = errors.New("the remote branch moved")

// push sends exactly the objects this batch created and asks the remote to move the branch from
// base to newTip; the remote refuses when the branch is no longer at base (compare-and-swap).
// Unlike a generic push it never walks the history, so its cost follows the batch, not the
// repository's age.
//
// Once a push has read the remote's capabilities, the next ones send the update without asking
// for the remote's references first: one request instead of two over HTTP. The update names base
// as the branch's old value, so the remote still refuses it when the branch moved; that refusal
// sends the push again the long way, which tells a moved branch from a refused update.
func (w *Writer) push(ctx context.Context, base, newTip plumbing.Hash, objects []plumbing.Hash) error {
	what := fmt.Sprintf("push %s to %s", w.cfg.Branch, w.remote.shown)
	caps := capability.NewList()
	// Without report-status a refused update would look taken: such a remote goes the long way.
	if known := w.remote.pushCaps; known != "" && caps.Decode([]byte(known)) == nil && caps.Supports(capability.ReportStatus) {
		err := w.sendUpdate(ctx, what, nil, caps, base, newTip, objects)
		if err == nil {
			return nil
		}
		w.remote.pushCaps = ""
		if !errors.Is(err, errPushRefused) {
			return err
		}
		logf.FromContext(ctx).V(1).Info("update refused without the remote's references; pushing again with them")
	}
	return w.sendUpdate(ctx, what, func(ar *packp.AdvRefs) error {
		name := plumbing.NewBranchReferenceName(w.cfg.Branch)
		current := plumbing.ZeroHash
		if refs, err := ar.AllReferences(); err == nil {
			if ref, err := refs.Reference(name); err == nil {
				current = ref.Hash()
			}
		}
		if current != base {
			return fmt.Errorf("%s: %w (at %s, expected %s)", what, errRemoteMoved, current, base)
		}
		return nil
	}, nil, base, newTip, objects)
}

// sendUpdate opens a push session and sends the update with objects. With check, it reads the
// remote's references first, lets check refuse them, and asks for the capabilities they offer;
// without, it asks for caps, those of the last update taken.
func (w *Writer) sendUpdate(ctx context.Context, what string, check func(*packp.AdvRefs) error, caps *capability.List, base, newTip plumbing.Hash, objects []plumbing.Hash) error {
	ctx, ex, cancel := w.remote.begin(ctx)
	defer cancel()
	sess, release, err := w.remote.receivePack(ctx, ex)
	if err != nil {
		return w.remote.describe(ctx, ex, what, err)
	}
	defer release()
	if check != nil {
		ar, err := sess.AdvertisedReferencesContext(ctx)
		if err != nil {
			return w.remote.describe(ctx, ex, what, err)
		}
		if err := check(ar); err != nil {
			return err
		}
		caps = ar.Capabilities
	}
	name := plumbing.NewBranchReferenceName(w.cfg.Branch)
	req := packp.NewReferenceUpdateRequestFromCapabilities(caps)
	req.Commands = []*packp.Command{{Name: name, Old: base, New: newTip}}
	rd, wr := io.Pipe()
	req.Packfile = rd
	encoded := make(chan error, 1)
	go func() {
		_, err := packfile.NewEncoder(wr, w.repo.Storer, false).Encode(dedupe(objects), 0)
		encoded <- wr.CloseWithError(err)
	}()
	rs, err := sess.ReceivePack(ctx, req)
	_ = rd.Close()
	if eerr := <-encoded; err == nil && eerr != nil {
		return fmt.Errorf("%s: encode the objects: %w", what, eerr)
	}
	if rs != nil && rs.Error() != nil {
		// The report's words are the remote's: only the fact is kept.
		err = errPushRefused
	}
	if err != nil {
		return w.remote.describe(ctx, ex, what, err)
	}
	w.remote.pushCaps = req.Capabilities.String() // what the update asks for is all the next one needs
	_ = w.repo.Storer.SetReference(plumbing.NewHashReference(w.remoteRef(), newTip))
	return nil
}

func dedupe(hs []plumbing.Hash) []plumbing.Hash {
	seen := make(map[plumbing.Hash]struct{}, len(hs))
	out := hs[:0:0]
	for _, h := range hs {
		if _, ok := seen[h]; !ok {
			seen[h] = struct{}{}
			out = append(out, h)
		}
	}
	return out
}
