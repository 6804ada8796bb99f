package engine

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"k8s.io/apimachinery/pkg/types"

	"github.com/siteops/siteops/internal/mirror/gitwriter"
)

// pushedAt is a commit of the GitTargets with the given UIDs, pushed at the i-th second.
func pushedAt(i int, uids ...string) gitwriter.PushedCommit {
	return gitwriter.PushedCommit{Hash: plumbing.ComputeHash(plumbing.CommitObject, fmt.Appendf(nil, "%d", i)),
		Author: gitwriter.Signature{Name: "alice", Email: "alice@example.com"}, Attribution: []string{"exact_user"},
		AuditIDs: []string{fmt.Sprintf("audit-%d", i)}, Subject: fmt.Sprintf("[UPDATE] v1/configmaps/ns/c%d", i), Files: 1,
		Targets: uids, PushedAt: time.Unix(int64(i), 0)}
}

// messages lists the messages of cs.
func messages(cs []Commit) []string {
	var out []string
	for _, c := range cs {
		out = append(out, strings.TrimPrefix(c.Message, "[UPDATE] v1/configmaps/ns/"))
	}
	return out
}

// TestCommitLogBounds: a target keeps its newest commits only, the record keeps at most its
// total across targets (the oldest of all go first), and a forgotten target's commits, or a
// name's commits of an earlier object, are gone and not recorded again.
func TestCommitLogBounds(t *testing.T) {
	l := NewCommitLog(3, 5)
	a, b := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}
	l.track(a, "uid-a")
	l.track(b, "uid-b")
	for i := range 5 {
		l.record([]gitwriter.PushedCommit{pushedAt(i, "uid-a")})
	}
	if got := messages(l.Recent("ns", "a", 0)); strings.Join(got, ",") != "c4,c3,c2" {
		t.Fatalf("target a keeps %v, want its 3 newest, newest first", got)
	}
	if got := messages(l.Recent("ns", "a", 2)); strings.Join(got, ",") != "c4,c3" {
		t.Fatalf("Recent(limit 2) = %v", got)
	}
	if l.Len() != 3 {
		t.Fatalf("Len = %d, want 3", l.Len())
	}

	// One commit holding changes of both targets, then more of b: 5 in all at most.
	l.record([]gitwriter.PushedCommit{pushedAt(5, "uid-a", "uid-b"), pushedAt(6, "uid-b"), pushedAt(7, "uid-b")})
	if l.Len() != 5 {
		t.Fatalf("Len = %d, want the total bound 5", l.Len())
	}
	if got := messages(l.Recent("ns", "a", 0)); strings.Join(got, ",") != "c5,c4" {
		t.Fatalf("target a keeps %v, want the oldest of all dropped first", got)
	}
	if got := messages(l.Recent("ns", "b", 0)); strings.Join(got, ",") != "c7,c6,c5" {
		t.Fatalf("target b keeps %v", got)
	}

	// Many pushes of one target never take the record past its bounds.
	for i := 8; i < 1000; i++ {
		l.record([]gitwriter.PushedCommit{pushedAt(i, "uid-b")})
	}
	if n, nb := l.Len(), len(l.Recent("ns", "b", 0)); n != 5 || nb != 3 {
		t.Fatalf("after 1000 pushes: Len %d, b keeps %d; want 5 and 3", n, nb)
	}

	// A commit of a target the record does not know is not recorded.
	l.record([]gitwriter.PushedCommit{pushedAt(1000, "uid-unknown")})
	if l.Len() != 5 {
		t.Fatalf("Len = %d after an unknown target's commit", l.Len())
	}

	// Forgotten: its commits are gone, its writer's last pushes are not recorded.
	l.forget(b)
	l.record([]gitwriter.PushedCommit{pushedAt(1001, "uid-b")})
	if got := l.Recent("ns", "b", 0); len(got) != 0 || l.Len() != 2 {
		t.Fatalf("after forget: b keeps %v, Len %d; want nothing and a's 2", messages(got), l.Len())
	}

	// The same name for a new object (deleted and created again): the earlier one's commits go.
	l.track(a, "uid-a2")
	l.record([]gitwriter.PushedCommit{pushedAt(1002, "uid-a"), pushedAt(1003, "uid-a2")})
	if got := messages(l.Recent("ns", "a", 0)); strings.Join(got, ",") != "c1003" {
		t.Fatalf("the new object a keeps %v, want only its own commit", got)
	}
}

// TestCommitLogRecord: a record says what the commit says, its texts bounded.
func TestCommitLogRecord(t *testing.T) {
	l := NewCommitLog(0, 0)
	if l.perTarget != CommitsPerTarget || l.total != CommitsTotal {
		t.Fatalf("defaults %d, %d", l.perTarget, l.total)
	}
	a := types.NamespacedName{Namespace: "ns", Name: "a"}
	l.track(a, "uid-a")
	long := strings.Repeat("é", 1000)
	p := gitwriter.PushedCommit{Hash: plumbing.NewHash("0123456789abcdef0123456789abcdef01234567"),
		Author: gitwriter.Signature{Name: "bob", Email: "bob@example.com"}, Attribution: []string{"exact_user", "absent"},
		AuditIDs: []string{"id-1", "id-2"}, Subject: long, Files: 7, Targets: []string{"uid-a"}, PushedAt: time.Unix(42, 0)}
	l.record([]gitwriter.PushedCommit{p, {Hash: plumbing.NewHash("1123456789abcdef0123456789abcdef01234567"), Author: gitwriter.Signature{Name: "Mirror", Email: "mirror@example.com"},
		Attribution: []string{"absent"}, Subject: "[DELETE] v1/configmaps/ns/x", Files: 1, Targets: []string{"uid-a"}, PushedAt: time.Unix(43, 0)}})
	got := l.Recent("ns", "a", 0)
	if len(got) != 2 {
		t.Fatalf("%d commits", len(got))
	}
	c := got[1]
	if c.Hash != p.Hash.String() || c.Author != "bob <bob@example.com>" || c.Attribution != "exact_user, absent" || c.AuditID != "id-1" || c.AuditIDs != 2 ||
		c.Files != 7 || !c.Pushed.Equal(time.Unix(42, 0)) {
		t.Fatalf("record %+v", c)
	}
	if len(c.Message) > maxCommitText || !strings.HasSuffix(c.Message, "é…") {
		t.Fatalf("message of %d bytes, want it cut at %d on a character: %q", len(c.Message), maxCommitText, c.Message)
	}
	if c := got[0]; c.Author != "Mirror <mirror@example.com>" || c.Attribution != "absent" || c.AuditID != "" || c.AuditIDs != 0 {
		t.Fatalf("committer's record %+v", c)
	}
}
