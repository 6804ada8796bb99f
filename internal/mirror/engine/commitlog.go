package engine

import (
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/types"

	"github.com/siteops/siteops/internal/mirror/gitwriter"
)

// Bounds of the engine's commit record.
const (
	// CommitsPerTarget is how many of a GitTarget's newest commits the record keeps.
	CommitsPerTarget = 50
	// CommitsTotal is how many commits the record keeps across every GitTarget; past it the
	// oldest commits go first, whatever their target.
	CommitsTotal = 10000
	// maxCommitText bounds each text of a record in bytes (an author's name, a CommitRequest's
	// message), so a record stays small whatever a tenant writes.
	maxCommitText = 256
)

// Commit is one commit the mirror pushed for a GitTarget.
type Commit struct {
	// Hash of the commit.
	Hash string
	// Author is the commit's author, "Name <email>" as committed.
	Author string
	// Attribution is how author attribution found the author: the commit's Attribution trailer,
	// one of exact_user, exact_serviceaccount, exact_deletecollection_item,
	// exact_deletecollection_scope, weak (from an audit event) or absent (no audit fact named
	// anyone: the committer, or --unattributed-author, authored it); a commit closed by a
	// CommitRequest may list several, strongest first, joined by ", ".
	Attribution string
	// AuditID is the API server's Audit-ID of the change the author was attributed from (the
	// first, when the commit's changes came from several audit events); empty when none was.
	AuditID string
	// AuditIDs counts the audit events the commit's changes were attributed from.
	AuditIDs int
	// Message is the first line of the commit's message.
	Message string
	// Files counts the files the commit changed.
	Files int
	// Pushed is when the push of the commit succeeded.
	Pushed time.Time
}

// CommitLog is the engine's in-memory record of the commits it pushed lately, per GitTarget:
// only commits whose push succeeded, at most perTarget for one target and total in all. A
// target's commits are forgotten when the target is deleted or leaves this shard (Forget).
// The record lives in the process: another replica, or this one after a restart, starts empty.
type CommitLog struct {
	perTarget, total int

	mu sync.Mutex
	// names maps the UID of each GitTarget the engine ran to its name, and uids back.
	names map[string]types.NamespacedName
	uids  map[types.NamespacedName]string
	// commits holds each target's commits, oldest first; n counts them all.
	commits map[types.NamespacedName][]Commit
	n       int
}

// NewCommitLog returns an empty record that keeps at most perTarget commits of one GitTarget
// and total in all (CommitsPerTarget and CommitsTotal when not positive).
func NewCommitLog(perTarget, total int) *CommitLog {
	if perTarget <= 0 {
		perTarget = CommitsPerTarget
	}
	if total <= 0 {
		total = CommitsTotal
	}
	return &CommitLog{perTarget: perTarget, total: total, names: map[string]types.NamespacedName{},
		uids: map[types.NamespacedName]string{}, commits: map[types.NamespacedName][]Commit{}}
}

// Recent returns up to limit of the newest commits pushed for GitTarget namespace/name, newest
// first; every commit kept when limit is not positive.
func (l *CommitLog) Recent(namespace, name string, limit int) []Commit {
	l.mu.Lock()
	defer l.mu.Unlock()
	cs := l.commits[types.NamespacedName{Namespace: namespace, Name: name}]
	if limit <= 0 || limit > len(cs) {
		limit = len(cs)
	}
	out := make([]Commit, 0, limit)
	for i := len(cs) - 1; i >= 0 && len(out) < limit; i-- {
		out = append(out, cs[i])
	}
	return out
}

// Len returns how many commits the record keeps, across every GitTarget.
func (l *CommitLog) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// track names the GitTarget whose changes carry uid. A new UID for the name is a new object:
// the commits of the one before are forgotten.
func (l *CommitLog) track(target types.NamespacedName, uid string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if old, ok := l.uids[target]; ok && old != uid {
		l.forgetLocked(target)
	}
	l.uids[target], l.names[uid] = uid, target
}

// forget drops target's commits and name.
func (l *CommitLog) forget(target types.NamespacedName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgetLocked(target)
}

func (l *CommitLog) forgetLocked(target types.NamespacedName) {
	if uid, ok := l.uids[target]; ok {
		delete(l.names, uid)
		delete(l.uids, target)
	}
	l.n -= len(l.commits[target])
	delete(l.commits, target)
}

// record adds the commits of a successful push to the record of each GitTarget whose changes
// they hold; targets the record does not know (forgotten) are skipped.
func (l *CommitLog) record(pushed []gitwriter.PushedCommit) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range pushed {
		var c *Commit
		for _, uid := range p.Targets {
			target, ok := l.names[uid]
			if !ok {
				continue
			}
			if c == nil {
				c = commitOf(p)
			}
			cs := l.commits[target]
			if len(cs) >= l.perTarget {
				kept := append(cs[:0], cs[len(cs)-l.perTarget+1:]...)
				l.n -= len(cs) - len(kept)
				cs = kept
			}
			l.commits[target] = append(cs, *c)
			l.n++
		}
	}
	for l.n > l.total {
		l.dropOldestLocked()
	}
}

// dropOldestLocked drops the oldest commit of all.
func (l *CommitLog) dropOldestLocked() {
	var oldest types.NamespacedName
	found := false
	for t, cs := range l.commits {
		if len(cs) > 0 && (!found || cs[0].Pushed.Before(l.commits[oldest][0].Pushed)) {
			oldest, found = t, true
		}
	}
	if !found {
		l.n = 0
		return
	}
	cs := l.commits[oldest]
	if len(cs) == 1 {
		delete(l.commits, oldest)
	} else {
		l.commits[oldest] = append(cs[:0], cs[1:]...)
	}
	l.n--
}

// commitOf is the record of pushed.
func commitOf(p gitwriter.PushedCommit) *Commit {
	c := &Commit{Hash: p.Hash.String(), Author: clip(p.Author.Name) + " <" + clip(p.Author.Email) + ">",
		Attribution: clip(strings.Join(p.Attribution, ", ")), AuditIDs: len(p.AuditIDs), Message: clip(p.Subject), Files: p.Files, Pushed: p.PushedAt}
	if len(p.AuditIDs) > 0 {
		c.AuditID = clip(p.AuditIDs[0])
	}
	return c
}

// clip copies s, cut to maxCommitText bytes on a character boundary (the cut marked with "…"):
// a record never holds on to the larger string s may be part of (a batch's whole message).
func clip(s string) string {
	if len(s) <= maxCommitText {
		return strings.Clone(s)
	}
	cut := maxCommitText - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
