package gitwriter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
)

// TrailerCommitRequest carries the UID of the CommitRequest a command's commit was made for, so
// a request retried after its outcome was lost (its leader gone between the push and the status
// write) finds its commit instead of reporting nothing.
const TrailerCommitRequest = "Commit-Request"

// RequestSearchDepth is how many of the branch's newest commits FindRequest reads.
const RequestSearchDepth = 100

type findRequest struct {
	request string
	done    chan commandOutcome
}

// trailer is the command's Commit-Request trailer line, or "" without a request.
func (c *Command) trailer() string {
	if v := trailerValue(c.Request); v != "" {
		return TrailerCommitRequest + ": " + v + "\n"
	}
	return ""
}

// FindRequest returns the newest of the remote branch's last RequestSearchDepth commits whose
// trailers name request (a CommitRequest's UID) and its author; the result's Commit is "" when
// no such commit is among them. It fetches that history into a store of its own, within the
// writer's fetch bounds, and leaves the writer's alone.
func (w *Writer) FindRequest(ctx context.Context, request string) (CommandResult, error) {
	req := findRequest{request: request, done: make(chan commandOutcome, 1)}
	return ask(ctx, w, w.finds, req, req.done, "the history")
}

// findRequest serves FindRequest on the writer's goroutine.
func (w *Writer) findRequest(ctx context.Context, request string) (CommandResult, error) {
	ctx, ex, cancel := w.remote.begin(ctx)
	defer cancel()
	what := fmt.Sprintf("fetch the last %d commits of %s from %s", RequestSearchDepth, w.cfg.Branch, w.remote.shown)
	sess, release, err := w.remote.uploadPack(ctx, ex)
	if err != nil {
		return CommandResult{}, w.remote.describe(ctx, ex, what, err)
	}
	defer release()
	ar, err := sess.AdvertisedReferencesContext(ctx)
	if errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return CommandResult{}, nil
	}
	if err != nil {
		return CommandResult{}, w.remote.describe(ctx, ex, what, err)
	}
	tip := w.advertisedTip(ar)
	if tip.IsZero() {
		return CommandResult{}, nil
	}
	req, err := shallowRequest(ar, tip, RequestSearchDepth)
	if err != nil {
		return CommandResult{}, fmt.Errorf("%s: %w", what, err)
	}
	st := newObjectStore(w.cfg.MaxFetchBytes, w.cfg.MaxFetchObjectBytes)
	resp, err := sess.UploadPack(ctx, req)
	if err == nil {
		err = packfile.UpdateObjectStorage(st, resp)
		_ = resp.Close()
	}
	if err != nil {
		return CommandResult{}, w.remote.describe(ctx, ex, what, err)
	}
	h := tip
	for range RequestSearchDepth {
		c, err := object.GetCommit(st, h)
		if err != nil {
			return CommandResult{}, nil // past the shallow end
		}
		if namesRequest(c.Message, request) {
			return CommandResult{Commit: h.String(), Author: Signature{Name: c.Author.Name, Email: c.Author.Email}}, nil
		}
		if len(c.ParentHashes) == 0 {
			return CommandResult{}, nil
		}
		h = c.ParentHashes[0]
	}
	return CommandResult{}, nil
}

// namesRequest reports whether msg's trailer paragraph, the last one (the writer always ends a
// message with it, after whatever a request's message says), has request's Commit-Request line.
func namesRequest(msg, request string) bool {
	msg = strings.TrimRight(msg, "\n")
	i := strings.LastIndex(msg, "\n\n")
	if i < 0 || request == "" {
		return false
	}
	return slices.Contains(strings.Split(msg[i+2:], "\n"), TrailerCommitRequest+": "+trailerValue(request))
}
