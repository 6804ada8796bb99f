package gitwriter

import (
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// opDropped marks a pending op that a later op made useless (see pendingOps.coalesce).
const opDropped OpKind = -1

type cursorKey struct {
	uid string
	gvr schema.GroupVersionResource
	ns  string
}

func keyOf(c Cursor) (cursorKey, bool) {
	if c.RV == "" || c.TargetUID == "" {
		return cursorKey{}, false
	}
	return cursorKey{c.TargetUID, c.GVR, c.Namespace}, true
}

// pendingOps holds the ops not yet pushed, in the order received.
//
// While pushes succeed every op is kept, so each change of a batch gets its commit and author.
// Once a push failed, the buffer coalesces: a new change of a file replaces the pending change
// of that file (the latest content wins, it is what the next push must write), and a cursor
// replaces the older cursor of its watch stream. Memory then follows the number of distinct
// files and streams, not the number of changes, however long the remote keeps refusing.
type pendingOps struct {
	ops []Op
	// coalescing is on after a failed push, until the buffer is pushed.
	coalescing bool
	// file is the index of the pending change of each path; cursor the index of the op carrying
	// the newest cursor of each stream. Both are kept only while coalescing.
	file   map[string]int
	cursor map[cursorKey]int
	// live counts ops that are not dropped; bytes the content they hold.
	live    int
	dropped int
	bytes   int64
}

func (p *pendingOps) len() int { return p.live }

// add appends op, replacing what it supersedes while coalescing.
func (p *pendingOps) add(op Op) {
	if p.coalescing {
		p.supersede(op)
		if op.Kind == OpMark {
			if _, ok := keyOf(op.Cursor); !ok {
				return // a mark without a cursor carries nothing
			}
		}
	}
	i := len(p.ops)
	p.ops = append(p.ops, op)
	p.live++
	p.bytes += int64(len(op.Change.Content))
	if p.coalescing {
		p.index(i)
	}
}

// index records op i as its path's change and its stream's newest cursor.
func (p *pendingOps) index(i int) {
	op := p.ops[i]
	if op.Kind == OpUpsert || op.Kind == OpDelete {
		p.file[cleanDir(op.Change.Path)] = i
	}
	if k, ok := keyOf(op.Cursor); ok {
		p.cursor[k] = i
	}
}

// supersede drops the pending change of op's file and, when op carries a cursor, the bare mark
// holding its stream's older cursor.
func (p *pendingOps) supersede(op Op) {
	if op.Kind == OpUpsert || op.Kind == OpDelete {
		if j, ok := p.file[cleanDir(op.Change.Path)]; ok {
			p.retire(j)
		}
	}
	if k, ok := keyOf(op.Cursor); ok {
		if j, ok := p.cursor[k]; ok && p.ops[j].Kind == OpMark {
			p.drop(j)
		}
	}
}

// retire removes the file change at j. Its cursor survives as a bare mark when it is still its
// stream's newest; the cursor is recorded after the next push, as before.
func (p *pendingOps) retire(j int) {
	old := p.ops[j]
	k, ok := keyOf(old.Cursor)
	if !ok || p.cursor[k] != j {
		p.drop(j)
		return
	}
	p.bytes -= int64(len(old.Change.Content))
	p.ops[j] = Op{Kind: OpMark, Target: old.Target, Cursor: old.Cursor}
}

func (p *pendingOps) drop(j int) {
	p.bytes -= int64(len(p.ops[j].Change.Content))
	p.ops[j] = Op{Kind: opDropped}
	p.live--
	p.dropped++
	if p.dropped > 64 && p.dropped > len(p.ops)/2 {
		p.compact()
	}
}

// compact removes dropped ops and rebuilds the indexes.
func (p *pendingOps) compact() {
	out := p.ops[:0]
	for _, op := range p.ops {
		if op.Kind != opDropped {
			out = append(out, op)
		}
	}
	clear(p.ops[len(out):])
	p.ops, p.dropped = out, 0
	if p.coalescing {
		clear(p.file)
		clear(p.cursor)
		for i := range p.ops {
			p.index(i)
		}
	}
}

// list returns the pending ops in order, without dropped ones.
func (p *pendingOps) list() []Op {
	if p.dropped > 0 {
		p.compact()
	}
	return p.ops
}

// startCoalescing switches to coalescing after a failed push, folding what is pending already.
func (p *pendingOps) startCoalescing() {
	if p.coalescing {
		return
	}
	ops := p.list()
	p.coalescing = true
	p.file, p.cursor = map[string]int{}, map[cursorKey]int{}
	p.ops, p.live, p.bytes = nil, 0, 0
	for _, op := range ops {
		p.add(op)
	}
}

// reset empties the buffer after a push and stops coalescing.
func (p *pendingOps) reset() {
	p.ops = nil // not kept for the next batch: most writers are idle, and there may be thousands
	p.live, p.dropped, p.bytes = 0, 0, 0
	p.coalescing, p.file, p.cursor = false, nil, nil
}

// MaxPendingChanges bounds how many pending changes PendingChanges returns for one GitTarget.
const MaxPendingChanges = 100

// Pending operations, as PendingChange.Operation names them.
const (
	// PendingWrite writes a file.
	PendingWrite = "write"
	// PendingDelete removes a file.
	PendingDelete = "delete"
	// PendingSweep removes the files of a folder its objects no longer have (after a replay).
	PendingSweep = "sweep"
)

// PendingChange is a copy of one change a Writer took but has not pushed yet.
type PendingChange struct {
	// Path is the file in the repository; for a sweep, the folder swept.
	Path string
	// Operation is PendingWrite, PendingDelete or PendingSweep.
	Operation string
	// Kind of the object; empty when not known (a sweep).
	Kind string
	// Ref names the object: <apiVersion>/<resource>/<namespace>/<name>; for a sweep, the prefix of
	// the objects it may remove.
	Ref string
	// Received is when the watch event arrived; zero when not known.
	Received time.Time
	// Author is whom the commit will name as author ("Name <email>"), when attribution found
	// someone (or --unattributed-author applies); empty means the committer.
	Author string
	// Attribution is the attribution result of the change (exact_user, weak, absent, …); empty
	// when the change was not attributed.
	Attribution string
}

// PendingChanges returns copies of the changes of GitTarget target (its UID) the writer took and
// has not pushed, oldest first: at most limit of them, and never more than MaxPendingChanges
// (also when limit is not positive). Changes still queued for the writer are counted in
// Status.Pending but listed only once taken; while a push keeps failing, a file's newer change
// replaces its pending one, as in the next commit.
func (w *Writer) PendingChanges(target string, limit int) []PendingChange {
	if limit <= 0 || limit > MaxPendingChanges {
		limit = MaxPendingChanges
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []PendingChange
	for _, op := range w.pending.ops {
		if len(out) >= limit {
			break
		}
		if op.Target != target {
			continue
		}
		var c PendingChange
		switch op.Kind {
		case OpUpsert, OpDelete:
			c = PendingChange{Path: strings.Clone(op.Change.Path), Operation: PendingWrite, Kind: strings.Clone(op.Change.Kind), Ref: strings.Clone(op.Change.Ref),
				Received: op.Change.Received, Attribution: strings.Clone(op.Change.Attribution)}
			if op.Kind == OpDelete {
				c.Operation = PendingDelete
			}
			if a := op.Change.Author; a != nil {
				c.Author = a.Name + " <" + a.Email + ">"
			}
		case OpSweep:
			c = PendingChange{Path: strings.Clone(op.SweepDir), Operation: PendingSweep, Ref: strings.Clone(op.SweepRefPrefix)}
		default:
			continue // marks change no file; dropped ops are gone
		}
		out = append(out, c)
	}
	return out
}
