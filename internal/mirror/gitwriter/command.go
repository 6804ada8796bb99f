package gitwriter

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
)

// Command asks a Writer to close its commit window now and commit one GitTarget's pending
// changes with a given message and author (a CommitRequest).
type Command struct {
	// Target is the GitTarget's UID: only ops of that target are the command's.
	Target string
	// Path is the GitTarget's folder in the repository; "" is the root. The pending changes of
	// files under it are the command's.
	Path string
	// Message is the commit message, used as given.
	Message string
	// Request is the UID of the CommitRequest the command serves: its commit carries it as a
	// Commit-Request trailer (FindRequest); "" adds none.
	Request string
	// Author authors the command's commit; nil means the committer. Only pending changes made
	// by this author are the command's: a change with no author of its own (not attributed) is
	// the committer's and is never credited to a submitter.
	Author *Signature
}

// CommandResult is the outcome of CloseWindow.
type CommandResult struct {
	// Commit is the pushed commit carrying the command's message; empty when the target had
	// nothing pending (no empty commit is made).
	Commit string
	// Author is the identity the command's commit is (or would have been) authored with.
	Author Signature
	// Commits lists every commit the close pushed, in order: changes of other authors or of
	// other GitTargets sharing the branch are pushed in the same push as their own commits.
	Commits []string
}

// ErrWriterStopped says the writer stopped (its target was removed or its settings changed)
// before it could serve a CloseWindow; retry against the new writer.
var ErrWriterStopped = errors.New("the git writer stopped")

type commandRequest struct {
	cmd  Command
	done chan commandOutcome
}

type commandOutcome struct {
	res CommandResult
	err error
}

// CloseWindow closes the writer's commit window now: every op handed over before the call is
// committed and pushed at once. The pending changes of cmd.Target under cmd.Path whose author is
// cmd.Author (nil: the committer, which is also the author of changes without one) become one
// commit with cmd.Message, authored by cmd.Author; every other pending change, including other
// targets' and unattributed ones, keeps its own author and its usual message, in its own commit
// (commits never mix authors). Watch cursors are recorded only after the push, as for
// any batch. When nothing of the target is pending, no commit is made and the result's Commit
// is empty. On a push failure the changes stay pending (the writer retries them as usual) and
// the error is returned.
func (w *Writer) CloseWindow(ctx context.Context, cmd Command) (CommandResult, error) {
	cmd.Path = cleanDir(cmd.Path)
	req := commandRequest{cmd: cmd, done: make(chan commandOutcome, 1)}
	// When ctx ends first, the writer still finishes the commit; the caller only stops waiting.
	return ask(ctx, w, w.commands, req, req.done, "the commit")
}

// ask hands req to Run on ch and waits for its outcome on done; what names what is awaited in
// the error when ctx ends first.
func ask[R any](ctx context.Context, w *Writer, ch chan<- R, req R, done <-chan commandOutcome, what string) (CommandResult, error) {
	select {
	case ch <- req:
	case <-w.stopped:
		return CommandResult{}, ErrWriterStopped
	case <-ctx.Done():
		return CommandResult{}, fmt.Errorf("wait for the git writer of %s: %w", w.name, ctx.Err())
	}
	select {
	case out := <-done:
		return out.res, out.err
	case <-ctx.Done():
		return CommandResult{}, fmt.Errorf("wait for %s on %s: %w", what, w.name, ctx.Err())
	}
}

func cleanDir(p string) string {
	p = strings.Trim(path.Clean("/"+p), "/")
	return p
}

// under reports whether file p is inside folder dir ("" is the root), on folder boundaries.
func under(p, dir string) bool {
	return dir == "" || p == dir || strings.HasPrefix(p, dir+"/")
}

// author is the command's author.
func (c *Command) author(committer Signature) Signature {
	if c.Author != nil {
		return *c.Author
	}
	return committer
}

// message is the command's message, ending in a newline as git messages do.
func (c *Command) message() string {
	if strings.HasSuffix(c.Message, "\n") {
		return c.Message
	}
	return c.Message + "\n"
}

// claims reports whether op goes into the command's commit: a file change of the command's own
// GitTarget, under its folder, authored by the command's author. A change without an author of
// its own is the committer's: it goes to a command without an author (the committer's), never
// to a submitter who did not make it.
func (c *Command) claims(op Op, committer Signature) bool {
	if c == nil || op.Target != c.Target {
		return false
	}
	switch op.Kind {
	case OpUpsert, OpDelete:
		if !under(cleanDir(op.Change.Path), c.Path) {
			return false
		}
	case OpSweep:
		if !under(cleanDir(op.SweepDir), c.Path) {
			return false
		}
	default:
		return false
	}
	return authorOf(op, committer) == c.author(committer)
}

// order puts the command's changes after every other pending op, so they make one commit at the
// tip, when that cannot change the resulting files: no other op that follows a command change
// touches its file (or sweeps its folder). Otherwise the order is kept and the command's
// changes may make several commits, each with its message.
func (c *Command) order(ops []Op, committer Signature) []Op {
	var mine, rest []Op
	paths := map[string]bool{}
	var dirs []string
	conflict := false
	for _, op := range ops {
		if c.claims(op, committer) {
			mine = append(mine, op)
			if op.Kind == OpSweep {
				dirs = append(dirs, cleanDir(op.SweepDir))
			} else {
				paths[cleanDir(op.Change.Path)] = true
			}
			continue
		}
		rest = append(rest, op)
		if conflict || len(mine) == 0 {
			continue
		}
		switch op.Kind {
		case OpUpsert, OpDelete:
			p := cleanDir(op.Change.Path)
			if paths[p] {
				conflict = true
			}
			for _, d := range dirs {
				if under(p, d) {
					conflict = true
				}
			}
		case OpSweep:
			d := cleanDir(op.SweepDir)
			for p := range paths {
				if under(p, d) {
					conflict = true
				}
			}
			for _, md := range dirs {
				if under(md, d) || under(d, md) {
					conflict = true
				}
			}
		}
	}
	if conflict || len(mine) == 0 {
		return ops
	}
	return append(rest, mine...)
}
