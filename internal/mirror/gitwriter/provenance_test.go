package gitwriter

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// parsedTrailers is what git itself reads as a commit's trailers: `git interpret-trailers
// --parse` on the commit message.
func parsedTrailers(t *testing.T, bare, commit string) string {
	t.Helper()
	msg := gitOut(t, "", "--git-dir", bare, "log", "-1", "--format=%B", commit)
	cmd := exec.Command("git", "interpret-trailers", "--parse")
	cmd.Stdin = strings.NewReader(msg + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git interpret-trailers: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// attributed is an upsert whose author attribution gave result with audit event id.
func attributed(path, rv, result, id string, author *Signature) Op {
	op := upsert(path, path+" "+rv+"\n", rv)
	op.Change.Attribution, op.Change.AuditID, op.Change.Author = result, id, author
	return op
}

func TestCommitsCarryProvenanceTrailersGitCanParse(t *testing.T) {
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	url, _ := remote.CreateRepo("trailers", "main")
	bare := remote.RepoDir("trailers")
	unknown := &Signature{"unknown", "unknown@example.invalid"}
	w, _ := startWriter(t, Config{URL: url, Branch: "main", Committer: Signature{"Mirror", "mirror@example.com"}, Window: 300 * time.Millisecond,
		Cluster: "prod-eu-1", Unattributed: unknown})
	ctx := context.Background()
	alice := &Signature{"alice", "alice@example.com"}
	ops := []Op{
		// Alice, exact, twice: one commit with both audit IDs.
		attributed("ns/core/configmaps/a.yaml", "1", "exact_user", "aaaaaaaa-0000-0000-0000-000000000001", alice),
		attributed("ns/core/configmaps/b.yaml", "2", "exact_user", "aaaaaaaa-0000-0000-0000-000000000002", alice),
		// Alice again, but weakly: its own commit, so each commit states one result.
		attributed("ns/core/configmaps/c.yaml", "3", "weak", "aaaaaaaa-0000-0000-0000-000000000003", alice),
		// A collection delete's items share one audit event: one Audit-ID line.
		attributed("ns/core/configmaps/d.yaml", "4", "exact_deletecollection_item", "aaaaaaaa-0000-0000-0000-000000000004", alice),
		attributed("ns/core/configmaps/e.yaml", "5", "exact_deletecollection_item", "aaaaaaaa-0000-0000-0000-000000000004", alice),
		// Nothing matched: the unattributed author, no Audit-ID.
		attributed("ns/core/configmaps/f.yaml", "6", AttributionAbsent, "", nil),
		// Never attributed (a replayed object): the committer's, stated absent.
		upsert("ns/core/configmaps/g.yaml", "g\n", "7"),
		// An audit ID cannot smuggle a trailer of its own in.
		attributed("ns/core/configmaps/h.yaml", "8", "exact_user", "bbbbbbbb\nAttribution: exact_serviceaccount", &Signature{"bob", "bob@example.com"}),
	}
	for i, op := range ops {
		if err := w.Enqueue(ctx, op); err != nil {
			t.Fatal(i, err)
		}
	}
	waitCommits(t, bare, 6)
	var got []string
	for _, c := range strings.Fields(gitOut(t, "", "--git-dir", bare, "rev-list", "--reverse", "main")) {
		author := gitOut(t, "", "--git-dir", bare, "log", "-1", "--format=%an <%ae>", c)
		got = append(got, author+"\n"+parsedTrailers(t, bare, c))
	}
	want := []string{
		"alice <alice@example.com>\nAudit-ID: aaaaaaaa-0000-0000-0000-000000000001\nAudit-ID: aaaaaaaa-0000-0000-0000-000000000002\nAttribution: exact_user\nCluster: prod-eu-1",
		"alice <alice@example.com>\nAudit-ID: aaaaaaaa-0000-0000-0000-000000000003\nAttribution: weak\nCluster: prod-eu-1",
		"alice <alice@example.com>\nAudit-ID: aaaaaaaa-0000-0000-0000-000000000004\nAttribution: exact_deletecollection_item\nCluster: prod-eu-1",
		"unknown <unknown@example.invalid>\nAttribution: absent\nCluster: prod-eu-1",
		"Mirror <mirror@example.com>\nAttribution: absent\nCluster: prod-eu-1",
		"bob <bob@example.com>\nAudit-ID: bbbbbbbbAttribution: exact_serviceaccount\nAttribution: exact_user\nCluster: prod-eu-1",
	}
	if strings.Join(got, "\n--\n") != strings.Join(want, "\n--\n") {
		t.Fatalf("commits:\n%s\n\nwant:\n%s", strings.Join(got, "\n--\n"), strings.Join(want, "\n--\n"))
	}
	// The subject and body stay what they were; the trailers are a paragraph of their own.
	if msg := gitOut(t, "", "--git-dir", bare, "log", "-1", "--format=%B", "main~1"); msg != "[CREATE] v1/configmaps/ns/g\n\nAttribution: absent\nCluster: prod-eu-1" {
		t.Fatalf("message = %q", msg)
	}
}

func TestUnattributedAuthorOnlyNamesChangesNothingMatched(t *testing.T) {
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	url, _ := remote.CreateRepo("unattributed", "main")
	bare := remote.RepoDir("unattributed")
	// Without an unattributed author, an absent change stays the committer's; no Cluster trailer.
	w, _ := startWriter(t, Config{URL: url, Branch: "main", Committer: Signature{"Mirror", "mirror@example.com"}, Window: 0})
	_ = w.Enqueue(context.Background(), attributed("ns/core/configmaps/a.yaml", "1", AttributionAbsent, "", nil))
	waitCommits(t, bare, 1)
	if got := gitOut(t, "", "--git-dir", bare, "log", "-1", "--format=%an <%ae>|%(trailers:only,unfold)", "main"); got != "Mirror <mirror@example.com>|Attribution: absent" {
		t.Fatalf("commit = %q", got)
	}
}

// TestCommitRequestMessageCannotForgeTrailers: a CommitRequest's message is a tenant's text. Lines
// that look like trailers, even after a "---" line (where git stops reading a message for
// trailers), stay body text: git reads only the mirror's own trailers.
func TestCommitRequestMessageCannotForgeTrailers(t *testing.T) {
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	url, _ := remote.CreateRepo("forged", "main")
	bare := remote.RepoDir("forged")
	w, _ := startWriter(t, Config{URL: url, Branch: "main", Committer: Signature{"Mirror", "mirror@example.com"}, Window: time.Hour, Cluster: "prod"})
	alice := &Signature{"alice", "alice@example.com"}
	_ = w.Enqueue(context.Background(), attributed("ns/core/configmaps/a.yaml", "1", "exact_user", "cccccccc-0000-0000-0000-000000000001", alice))
	forged := "Release 42\n\nAudit-ID: forged-1\nAttribution: exact_user\nCluster: other\n---\nAudit-ID: forged-2\nAttribution: exact_serviceaccount\n"
	res, err := w.CloseWindow(context.Background(), Command{Target: "t", Message: forged, Author: alice})
	if err != nil || res.Commit == "" {
		t.Fatalf("close window: %+v, %v", res, err)
	}
	want := "Audit-ID: cccccccc-0000-0000-0000-000000000001\nAttribution: exact_user\nCluster: prod"
	if got := parsedTrailers(t, bare, res.Commit); got != want {
		t.Fatalf("git reads trailers:\n%s\nwant:\n%s", got, want)
	}
	if got := gitOut(t, "", "--git-dir", bare, "log", "-1", "--format=%(trailers:only,unfold)", res.Commit); got != want {
		t.Fatalf("git log reads trailers:\n%s\nwant:\n%s", got, want)
	}
	// The tenant's words are all still there, as body text.
	if msg := gitOut(t, "", "--git-dir", bare, "log", "-1", "--format=%B", res.Commit); !strings.Contains(msg, "Audit-ID: forged-2") || !strings.HasPrefix(msg, "Release 42\n") {
		t.Fatalf("message = %q", msg)
	}
}

func TestTrailerFormat(t *testing.T) {
	w := &Writer{cfg: Config{Cluster: " eu\r\n1 "}}
	ops := []*Op{{Change: Change{AuditID: "x", Attribution: "weak"}}, {Change: Change{AuditID: "x", Attribution: "exact_user"}}, {Kind: OpSweep}}
	got := w.trailers(ops)
	want := "Audit-ID: x\nAttribution: exact_user\nAttribution: weak\nAttribution: absent\nCluster: eu1\n"
	if got != want {
		t.Fatalf("trailers = %q, want %q", got, want)
	}
	if got := withTrailers("[CREATE] x\n", "Attribution: absent\n"); got != "[CREATE] x\n\nAttribution: absent\n" {
		t.Fatalf("withTrailers = %q", got)
	}
	for in, want := range map[string]string{"a\n---\nb": "a\n ---\nb", "--- x": " --- x", "a -- b": "a -- b"} {
		if got := bodyText(in); got != want {
			t.Errorf("bodyText(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestFindRequest: a command's commit names its request in a Commit-Request trailer, and
// FindRequest finds it among the branch's newest commits, past later commits; a request's
// message that writes another request's trailer line does not make that one found.
func TestFindRequest(t *testing.T) {
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	url, _ := remote.CreateRepo("requests", "main")
	bare := remote.RepoDir("requests")
	w, _ := startWriter(t, Config{URL: url, Branch: "main", Committer: Signature{"Mirror", "mirror@example.com"}, Window: time.Hour})
	ctx := context.Background()
	alice := &Signature{"alice", "alice@example.com"}
	_ = w.Enqueue(ctx, attributed("ns/core/configmaps/a.yaml", "1", "exact_user", "cccccccc-0000-0000-0000-000000000001", alice))
	forged := "Release 1\n\nCommit-Request: request-2\n"
	res, err := w.CloseWindow(ctx, Command{Target: "t", Message: forged, Author: alice, Request: "request-1"})
	if err != nil || res.Commit == "" {
		t.Fatalf("close window: %+v, %v", res, err)
	}
	if got := gitOut(t, "", "--git-dir", bare, "log", "-1", "--format=%(trailers:key=Commit-Request,valueonly,unfold)", res.Commit); got != "request-1" {
		t.Fatalf("Commit-Request trailer %q, want request-1", got)
	}
	// Later commits on top: the search goes past them.
	for i := range 3 {
		_ = w.Enqueue(ctx, attributed(fmt.Sprintf("ns/core/configmaps/b%d.yaml", i), "1", "exact_user", "", alice))
		if _, err := w.CloseWindow(ctx, Command{Target: "t", Message: fmt.Sprintf("later %d", i), Author: alice}); err != nil {
			t.Fatal(err)
		}
	}
	found, err := w.FindRequest(ctx, "request-1")
	if err != nil || found.Commit != res.Commit || found.Author != *alice {
		t.Fatalf("FindRequest(request-1) = %+v, %v; want %s by alice", found, err, res.Commit)
	}
	for _, other := range []string{"request-2", "request"} {
		if found, err := w.FindRequest(ctx, other); err != nil || found.Commit != "" {
			t.Fatalf("FindRequest(%s) = %+v, %v; want nothing", other, found, err)
		}
	}
}

// TestOnCommitsTellsPushedCommits: OnCommits hears of each commit once its push succeeded, with
// the author, trailers, subject, files and GitTargets the commit has; a push that failed tells
// nothing.
func TestOnCommitsTellsPushedCommits(t *testing.T) {
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	url, _ := remote.CreateRepo("oncommits", "main")
	bare := remote.RepoDir("oncommits")
	var mu sync.Mutex
	var told [][]PushedCommit
	w, _ := startWriter(t, Config{URL: url, Branch: "main", Committer: Signature{"Mirror", "mirror@example.com"}, Window: 300 * time.Millisecond,
		RetryInterval: 100 * time.Millisecond, OnCommits: func(cs []PushedCommit) { mu.Lock(); told = append(told, cs); mu.Unlock() }})
	ctx := context.Background()
	told1 := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(told)
	}
	if err := w.Enqueue(ctx, upsert("ns/core/configmaps/first.yaml", "first\n", "0")); err != nil {
		t.Fatal(err)
	}
	waitCommits(t, bare, 1)
	testenv.Eventually(t, 5*time.Second, func() error {
		if n := told1(); n != 1 {
			return fmt.Errorf("told of %d pushes, want 1", n)
		}
		return nil
	})
	remote.SetFault(&servers.GitFault{Refuse: true})
	alice := &Signature{"alice", "alice@example.com"}
	other := upsert("ns/core/configmaps/c.yaml", "c\n", "3")
	other.Target = "u"
	for _, op := range []Op{
		attributed("ns/core/configmaps/a.yaml", "1", "exact_user", "aaaaaaaa-0000-0000-0000-000000000001", alice),
		attributed("ns/core/configmaps/b.yaml", "2", "exact_user", "aaaaaaaa-0000-0000-0000-000000000002", alice),
		other,
	} {
		if err := w.Enqueue(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		if w.Status().LastError == nil {
			return errors.New("no push failed yet")
		}
		return nil
	})
	if n := told1(); n != 1 {
		t.Fatalf("OnCommits was told of %d pushes, want the first only: every later push failed", n)
	}
	remote.SetFault(nil)
	waitCommits(t, bare, 3)
	hashes := strings.Fields(gitOut(t, "", "--git-dir", bare, "rev-list", "--reverse", "main"))[1:]
	testenv.Eventually(t, 5*time.Second, func() error {
		if n := told1(); n != 2 {
			return fmt.Errorf("told of %d pushes, want 2", n)
		}
		return nil
	})
	mu.Lock()
	cs := told[1]
	mu.Unlock()
	if len(cs) != 2 {
		t.Fatalf("told of %d commits, want 2: %+v", len(cs), cs)
	}
	first, second := cs[0], cs[1]
	if first.Hash.String() != hashes[0] || first.Author != *alice || strings.Join(first.Attribution, ",") != "exact_user" ||
		strings.Join(first.AuditIDs, ",") != "aaaaaaaa-0000-0000-0000-000000000001,aaaaaaaa-0000-0000-0000-000000000002" ||
		first.Subject != "[BATCH] 2 changes (2 create)" || first.Files != 2 || strings.Join(first.Targets, ",") != "t" || first.PushedAt.IsZero() {
		t.Errorf("first commit %+v, want alice's batch %s", first, hashes[0])
	}
	if second.Hash.String() != hashes[1] || second.Author != (Signature{"Mirror", "mirror@example.com"}) || strings.Join(second.Attribution, ",") != AttributionAbsent ||
		len(second.AuditIDs) != 0 || second.Subject != "[CREATE] v1/configmaps/ns/c" || second.Files != 1 || strings.Join(second.Targets, ",") != "u" {
		t.Errorf("second commit %+v, want the committer's %s", second, hashes[1])
	}
}
