package gitwriter

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/siteops/siteops/internal/mirror/metrics"
)

// sweepOutcome is what became of one sweep of a build: err is its refusal, nil when it ran.
type sweepOutcome struct {
	target, dir string
	err         error
}

type appliedChange struct {
	ops  []*Op
	path string
	verb string
	ref  string
}

// groupChanges tracks, for one commit, each touched path's state before the commit, so several
// ops on one path collapse into the one change the commit really makes.
type groupChanges struct {
	ix      *treeIndex
	order   []string
	touched map[string]*touchedPath
}

type touchedPath struct {
	baseHash   plumbing.Hash
	baseExists bool
	ops        []*Op
	ref        string
}

func (g *groupChanges) touch(p, ref string, op *Op) error {
	t := g.touched[p]
	if t == nil {
		h, ok, err := g.ix.get(p)
		if err != nil {
			return err
		}
		t = &touchedPath{baseHash: h, baseExists: ok}
		g.touched[p] = t
		g.order = append(g.order, p)
	}
	t.ops = append(t.ops, op)
	t.ref = ref
	return nil
}

// result lists the net changes of the group in the order paths were first touched.
func (g *groupChanges) result() ([]appliedChange, error) {
	var out []appliedChange
	for _, p := range g.order {
		t := g.touched[p]
		h, ok, err := g.ix.get(p)
		if err != nil {
			return nil, err
		}
		var verb string
		switch {
		case !t.baseExists && ok:
			verb = "CREATE"
		case t.baseExists && !ok:
			verb = "DELETE"
		case t.baseExists && ok && h != t.baseHash:
			verb = "UPDATE"
		default:
			continue
		}
		out = append(out, appliedChange{ops: t.ops, path: p, verb: verb, ref: t.ref})
	}
	return out, nil
}

// build writes the commits for ops on top of base and returns the new tip (base when nothing
// changed) and the changes that made it into a commit.
func (w *Writer) build(base plumbing.Hash, ops []Op, cmd *Command) (plumbing.Hash, []appliedChange, []plumbing.Hash, error) {
	s := w.repo.Storer
	var rootTree plumbing.Hash
	if !base.IsZero() {
		c, err := object.GetCommit(s, base)
		if err != nil {
			return base, nil, nil, fmt.Errorf("read tip commit %s: %w", base, err)
		}
		rootTree = c.TreeHash
	}
	ix := newTreeIndex(s, rootTree)
	w.store.tracking = true
	defer func() { w.store.tracking = false }()
	w.built = w.built[:0]
	w.sweeps = w.sweeps[:0]
	clear(w.made)
	w.commits, w.commandCommit, w.made = w.commits[:0], plumbing.ZeroHash, w.made[:0]
	parent := base
	parentTree := rootTree
	var all []appliedChange
	for _, group := range w.groups(ops, cmd) {
		g := &groupChanges{ix: ix, touched: map[string]*touchedPath{}}
		for i := range group {
			if err := w.apply(g, &group[i]); err != nil {
				return base, nil, nil, err
			}
		}
		applied, err := g.result()
		if err != nil {
			return base, nil, nil, err
		}
		if len(applied) == 0 {
			continue
		}
		tree, err := ix.write()
		if err != nil {
			return base, nil, nil, err
		}
		if tree == parentTree {
			continue
		}
		author := authorOf(*applied[0].ops[0], w.cfg.Committer)
		msg := message(applied)
		claimed := cmd.claims(*applied[0].ops[0], w.cfg.Committer)
		if claimed {
			author, msg = cmd.author(w.cfg.Committer), bodyText(cmd.message())
		}
		var made []*Op
		for _, a := range applied {
			made = append(made, a.ops...)
		}
		trailers := w.trailers(made)
		if claimed {
			trailers += cmd.trailer()
		}
		now := time.Now()
		commit := &object.Commit{
			Author:    object.Signature{Name: author.Name, Email: author.Email, When: now},
			Committer: object.Signature{Name: w.cfg.Committer.Name, Email: w.cfg.Committer.Email, When: now},
			Message:   withTrailers(msg, trailers),
			TreeHash:  tree,
		}
		if !parent.IsZero() {
			commit.ParentHashes = []plumbing.Hash{parent}
		}
		if w.cfg.Signer != nil {
			// Nothing is committed unsigned: a failure keeps the batch pending.
			if err := signCommit(w.cfg.Signer, commit); err != nil {
				return base, nil, nil, fmt.Errorf("with the GitProvider's signing key: %w", err)
			}
		}
		obj := s.NewEncodedObject()
		if err := commit.Encode(obj); err != nil {
			return base, nil, nil, fmt.Errorf("encode commit: %w", err)
		}
		h, err := s.SetEncodedObject(obj)
		if err != nil {
			return base, nil, nil, fmt.Errorf("store commit: %w", err)
		}
		metrics.Commits.Inc()
		w.built = append(w.built, h)
		w.commits = append(w.commits, h)
		if claimed {
			w.commandCommit = h
		}
		if w.cfg.OnCommits != nil {
			ids, results := provenance(made)
			w.made = append(w.made, PushedCommit{Hash: h, Author: author, Attribution: results, AuditIDs: ids,
				Subject: subject(msg), Files: len(applied), Targets: targetsOf(made)})
		}
		parent, parentTree = h, tree
		all = append(all, applied...)
	}
	// The list is handed over, not kept: an idle writer holds no array of its last build.
	objects := append(w.built, ix.written...)
	w.built = nil
	return parent, all, objects, nil
}

// groups splits ops into the commits they make: one per change when the window is 0, else one
// per run of consecutive changes by the same author with the same attribution result (so
// per-event authors keep their order).
func (w *Writer) groups(ops []Op, cmd *Command) [][]Op {
	var out [][]Op
	start := 0
	for i := 1; i <= len(ops); i++ {
		if i < len(ops) && !w.splitBefore(ops[i-1], ops[i], cmd) {
			continue
		}
		out = append(out, ops[start:i])
		start = i
	}
	return out
}

func (w *Writer) splitBefore(prev, next Op, cmd *Command) bool {
	if next.Kind == OpMark {
		return false
	}
	if cp, cn := cmd.claims(prev, w.cfg.Committer), cmd.claims(next, w.cfg.Committer); cp || cn {
		// A command's changes make one commit, whatever the window; they never share it.
		return cp != cn
	}
	if w.cfg.Window == 0 {
		return true
	}
	// One author and one attribution result per commit, so its Attribution trailer covers
	// every change in it.
	return authorOf(prev, w.cfg.Committer) != authorOf(next, w.cfg.Committer) || attributionOf(prev) != attributionOf(next)
}

func authorOf(op Op, committer Signature) Signature {
	if op.Change.Author != nil {
		return *op.Change.Author
	}
	return committer
}

func (w *Writer) apply(g *groupChanges, op *Op) error {
	ix := g.ix
	switch op.Kind {
	case OpUpsert:
		if err := g.touch(op.Change.Path, op.Change.Ref, op); err != nil {
			return err
		}
		h := plumbing.ComputeHash(plumbing.BlobObject, op.Change.Content)
		if old, exists, err := ix.get(op.Change.Path); err != nil || (exists && old == h) {
			return err
		}
		obj := w.repo.Storer.NewEncodedObject()
		obj.SetType(plumbing.BlobObject)
		wr, err := obj.Writer()
		if err != nil {
			return fmt.Errorf("write blob: %w", err)
		}
		if _, err := wr.Write(op.Change.Content); err != nil {
			return fmt.Errorf("write blob: %w", err)
		}
		_ = wr.Close()
		if _, err := w.repo.Storer.SetEncodedObject(obj); err != nil {
			return fmt.Errorf("store blob: %w", err)
		}
		w.built = append(w.built, h)
		return ix.set(op.Change.Path, h)
	case OpDelete:
		if err := g.touch(op.Change.Path, op.Change.Ref, op); err != nil {
			return err
		}
		_, err := ix.remove(op.Change.Path)
		return err
	case OpSweep:
		files, err := ix.files(op.SweepDir, w.cfg.MaxSweepEntries)
		var tooLarge *folderTooLarge
		if errors.As(err, &tooLarge) {
			w.sweeps = append(w.sweeps, sweepOutcome{target: op.Target, dir: op.SweepDir, err: tooLarge})
			return nil
		}
		if err != nil {
			return err
		}
		var gone []string
		for _, f := range files {
			if _, keep := op.Keep[f]; !keep {
				gone = append(gone, f)
			}
		}
		if len(gone) > w.cfg.MaxSweepChanges {
			err := &folderTooLarge{dir: op.SweepDir, what: fmt.Sprintf("it would remove %d files, more than %d (limit: %s)", len(gone), w.cfg.MaxSweepChanges, FlagMaxSweepChanges)}
			w.sweeps = append(w.sweeps, sweepOutcome{target: op.Target, dir: op.SweepDir, err: err})
			return nil
		}
		w.sweeps = append(w.sweeps, sweepOutcome{target: op.Target, dir: op.SweepDir})
		for _, f := range gone {
			name := strings.TrimSuffix(f[strings.LastIndex(f, "/")+1:], ".yaml")
			if err := g.touch(f, op.SweepRefPrefix+name, op); err != nil {
				return err
			}
			if _, err := ix.remove(f); err != nil {
				return err
			}
		}
	}
	return nil
}

// subject is the first line of msg.
func subject(msg string) string {
	line, _, _ := strings.Cut(msg, "\n")
	return strings.TrimSpace(line)
}

// targetsOf lists the distinct GitTarget UIDs of ops.
func targetsOf(ops []*Op) []string {
	var out []string
	for _, op := range ops {
		if op.Target != "" && !slices.Contains(out, op.Target) {
			out = append(out, op.Target)
		}
	}
	return out
}

// message is "[VERB] ref" for one change, and a summary with one line per change for a batch.
func message(applied []appliedChange) string {
	if len(applied) == 1 {
		return fmt.Sprintf("[%s] %s\n", applied[0].verb, applied[0].ref)
	}
	counts := map[string]int{}
	lines := make([]string, 0, len(applied))
	for _, a := range applied {
		counts[a.verb]++
		lines = append(lines, fmt.Sprintf("[%s] %s", a.verb, a.ref))
	}
	var parts []string
	for _, v := range []string{"CREATE", "UPDATE", "DELETE"} {
		if counts[v] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[v], strings.ToLower(v)))
		}
	}
	sort.Strings(lines)
	return fmt.Sprintf("[BATCH] %d changes (%s)\n\n%s\n", len(applied), strings.Join(parts, ", "), strings.Join(lines, "\n"))
}
