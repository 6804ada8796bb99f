package gitwriter

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/runtime/schema"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

func gitOut(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_AUTHOR_NAME=Someone", "GIT_AUTHOR_EMAIL=someone@example.com", "GIT_COMMITTER_NAME=Someone", "GIT_COMMITTER_EMAIL=someone@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

type recorder struct {
	mu   sync.Mutex
	rv   map[string]string
	fail bool
}

func (r *recorder) RecordWatchCursor(_ context.Context, uid string, gvr schema.GroupVersionResource, ns, rv string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail {
		return fmt.Errorf("store down")
	}
	if r.rv == nil {
		r.rv = map[string]string{}
	}
	r.rv[uid+"/"+gvr.Resource+"/"+ns] = rv
	return nil
}

func (r *recorder) get(k string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rv[k]
}

var cmGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

func upsert(path, content, rv string) Op {
	return Op{Kind: OpUpsert, Target: "t", Change: Change{Path: path, Content: []byte(content), Ref: "v1/configmaps/ns/" + strings.TrimSuffix(filepath.Base(path), ".yaml"), Received: time.Now()},
		Cursor: Cursor{TargetUID: "t", GVR: cmGVR, Namespace: "ns", RV: rv}}
}

func startWriter(t *testing.T, cfg Config) (*Writer, context.CancelFunc) {
	t.Helper()
	if cfg.Egress == nil {
		// The test remotes serve plain HTTP on loopback.
		cfg.Egress = localEgress(t)
	}
	w := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return w, cancel
}

func waitCommits(t *testing.T, bare string, n int) {
	t.Helper()
	testenv.Eventually(t, 15*time.Second, func() error {
		cmd := exec.Command("git", "--git-dir", bare, "rev-list", "--count", "main")
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("rev-list: %w", err)
		}
		if got := strings.TrimSpace(string(out)); got != fmt.Sprint(n) {
			return fmt.Errorf("%s commits, want %d", got, n)
		}
		return nil
	})
}

func TestWriterBatchesDedupsDeletesAndRecordsCursorsAfterPush(t *testing.T) {
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{Username: "u", Password: "p"})
	url, err := remote.CreateRepo("batch", "main")
	if err != nil {
		t.Fatal(err)
	}
	bare := remote.RepoDir("batch")
	auth, _ := Credentials(url, map[string][]byte{"username": []byte("u"), "password": []byte("p")})
	rec := &recorder{}
	var pushedMu sync.Mutex
	var pushed []Pushed
	w, _ := startWriter(t, Config{URL: url, Branch: "main", Auth: auth, Committer: Signature{"Mirror", "mirror@example.com"},
		Window: 200 * time.Millisecond, Cursors: rec, OnPushed: func(p []Pushed) { pushedMu.Lock(); pushed = append(pushed, p...); pushedMu.Unlock() }})
	ctx := context.Background()

	for i, op := range []Op{upsert("m/ns/core/configmaps/a.yaml", "a: 1\n", "10"), upsert("m/ns/core/configmaps/b.yaml", "b: 1\n", "11"), upsert("m/ns/core/configmaps/a.yaml", "a: 2\n", "12")} {
		if err := w.Enqueue(ctx, op); err != nil {
			t.Fatal(i, err)
		}
	}
	waitCommits(t, bare, 1)
	if got := gitOut(t, "", "--git-dir", bare, "show", "main:m/ns/core/configmaps/a.yaml"); got != "a: 2" {
		t.Fatalf("a.yaml = %q", got)
	}
	msg := gitOut(t, "", "--git-dir", bare, "log", "-1", "--format=%an <%ae>|%cn|%B", "main")
	if !strings.HasPrefix(msg, "Mirror <mirror@example.com>|Mirror|[BATCH] 2 changes (2 create)") || !strings.Contains(msg, "[CREATE] v1/configmaps/ns/a") {
		t.Fatalf("commit = %q", msg)
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if rec.get("t/configmaps/ns") != "12" {
			return fmt.Errorf("cursor = %q", rec.get("t/configmaps/ns"))
		}
		return nil
	})

	// Unchanged content and a cursor-only mark push nothing but move the cursor.
	_ = w.Enqueue(ctx, upsert("m/ns/core/configmaps/a.yaml", "a: 2\n", "13"))
	_ = w.Enqueue(ctx, Op{Kind: OpMark, Cursor: Cursor{TargetUID: "t", GVR: cmGVR, Namespace: "ns", RV: "14"}})
	testenv.Eventually(t, 5*time.Second, func() error {
		if rec.get("t/configmaps/ns") != "14" {
			return fmt.Errorf("cursor = %q", rec.get("t/configmaps/ns"))
		}
		return nil
	})
	waitCommits(t, bare, 1)

	// A failing push keeps the changes pending and the cursor where it was.
	gitOut(t, bare, "config", "http.receivepack", "false")
	_ = w.Enqueue(ctx, Op{Kind: OpDelete, Change: Change{Path: "m/ns/core/configmaps/b.yaml", Ref: "v1/configmaps/ns/b", Received: time.Now()}, Cursor: Cursor{TargetUID: "t", GVR: cmGVR, Namespace: "ns", RV: "15"}})
	testenv.Eventually(t, 5*time.Second, func() error {
		if w.Status().LastError == nil {
			return fmt.Errorf("no error reported")
		}
		return nil
	})
	if st := w.Status(); st.Pending != 1 || rec.get("t/configmaps/ns") != "14" {
		t.Fatalf("while the push fails: pending %d, cursor %q", st.Pending, rec.get("t/configmaps/ns"))
	}
	gitOut(t, bare, "config", "http.receivepack", "true")
	waitCommits(t, bare, 2)
	if msg := gitOut(t, "", "--git-dir", bare, "log", "-1", "--format=%B", "main"); msg != "[DELETE] v1/configmaps/ns/b\n\nAttribution: absent" {
		t.Fatalf("delete commit = %q", msg)
	}
	if files := gitOut(t, "", "--git-dir", bare, "ls-tree", "-r", "--name-only", "main"); files != "m/ns/core/configmaps/a.yaml" {
		t.Fatalf("files = %q", files)
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if rec.get("t/configmaps/ns") != "15" || w.Status().LastError != nil || w.Status().Pending != 0 {
			return fmt.Errorf("cursor %q status %+v", rec.get("t/configmaps/ns"), w.Status())
		}
		return nil
	})
	pushedMu.Lock()
	defer pushedMu.Unlock()
	// Every event that reached the remote is observed: a twice, b, and b's delete.
	if len(pushed) != 4 {
		t.Fatalf("observed %d pushed events, want 4", len(pushed))
	}
}

func TestWriterOneCommitPerChangeSweepAndAuthors(t *testing.T) {
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	url, _ := remote.CreateRepo("single", "main")
	bare := remote.RepoDir("single")
	w, _ := startWriter(t, Config{URL: url, Branch: "main", Committer: Signature{"Mirror", "mirror@example.com"}, Window: 0})
	ctx := context.Background()
	alice := upsert("ns/core/configmaps/a.yaml", "a\n", "1")
	alice.Change.Author = &Signature{"Alice", "alice@example.com"}
	_ = w.Enqueue(ctx, alice)
	_ = w.Enqueue(ctx, upsert("ns/core/configmaps/b.yaml", "b\n", "2"))
	_ = w.Enqueue(ctx, upsert("ns/core/configmaps/c.yaml", "c\n", "3"))
	waitCommits(t, bare, 3)
	log := gitOut(t, "", "--git-dir", bare, "log", "--reverse", "--format=%an|%s", "main")
	if log != "Alice|[CREATE] v1/configmaps/ns/a\nMirror|[CREATE] v1/configmaps/ns/b\nMirror|[CREATE] v1/configmaps/ns/c" {
		t.Fatalf("log:\n%s", log)
	}
	_ = w.Enqueue(ctx, Op{Kind: OpSweep, SweepDir: "ns/core/configmaps", Keep: map[string]struct{}{"ns/core/configmaps/b.yaml": {}}, SweepRefPrefix: "v1/configmaps/ns/"})
	waitCommits(t, bare, 4)
	if files := gitOut(t, "", "--git-dir", bare, "ls-tree", "-r", "--name-only", "main"); files != "ns/core/configmaps/b.yaml" {
		t.Fatalf("after sweep: %q", files)
	}
	if msg := gitOut(t, "", "--git-dir", bare, "log", "-1", "--format=%B", "main"); !strings.Contains(msg, "[BATCH] 2 changes (2 delete)") {
		t.Fatalf("sweep commit = %q", msg)
	}
}

// pushReadme is someone else pushing a commit that adds README.md to main; it returns its hash.
func pushReadme(t *testing.T, url string) string {
	t.Helper()
	clone := t.TempDir()
	gitOut(t, "", "clone", "-q", url, clone)
	if err := os.WriteFile(filepath.Join(clone, "README.md"), []byte("hand written\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitOut(t, clone, "add", "README.md")
	gitOut(t, clone, "commit", "-q", "-m", "docs: readme")
	gitOut(t, clone, "push", "-q", "origin", "main")
	return gitOut(t, clone, "rev-parse", "HEAD")
}

func TestWriterRebuildsOnMovedRemote(t *testing.T) {
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	url, _ := remote.CreateRepo("moved", "main")
	bare := remote.RepoDir("moved")
	w, _ := startWriter(t, Config{URL: url, Branch: "main", Committer: Signature{"Mirror", "mirror@example.com"}, Window: 50 * time.Millisecond})
	ctx := context.Background()
	_ = w.Enqueue(ctx, upsert("ns/core/configmaps/a.yaml", "a\n", "1"))
	waitCommits(t, bare, 1)

	// Someone else pushes to the branch.
	theirs := pushReadme(t, url)

	_ = w.Enqueue(ctx, upsert("ns/core/configmaps/b.yaml", "b\n", "2"))
	waitCommits(t, bare, 3)
	if got := gitOut(t, "", "--git-dir", bare, "log", "--format=%s", "main"); got != "[CREATE] v1/configmaps/ns/b\ndocs: readme\n[CREATE] v1/configmaps/ns/a" {
		t.Fatalf("history:\n%s", got)
	}
	gitOut(t, "", "--git-dir", bare, "merge-base", "--is-ancestor", theirs, "main")
	if files := gitOut(t, "", "--git-dir", bare, "ls-tree", "-r", "--name-only", "main"); files != "README.md\nns/core/configmaps/a.yaml\nns/core/configmaps/b.yaml" {
		t.Fatalf("files:\n%s", files)
	}
	// The remote holds every object of both histories.
	gitOut(t, "", "--git-dir", bare, "fsck", "--strict")
}

func TestCredentials(t *testing.T) {
	if a, err := Credentials("https://git.example/r.git", nil); err != nil || a != nil {
		t.Fatalf("anonymous: %v %v", a, err)
	}
	if a, _ := Credentials("https://git.example/r.git", map[string][]byte{"bearerToken": []byte("tok\n")}); a == nil || a.Name() != "http-token-auth" {
		t.Fatalf("bearer: %v", a)
	}
	if _, err := Credentials("git@git.example:r.git", map[string][]byte{"identity": []byte("key")}); err == nil || !strings.Contains(err.Error(), "known_hosts") {
		t.Fatalf("ssh without known_hosts: %v", err)
	}
	if _, err := Credentials("ssh://git@git.example/r.git", map[string][]byte{"known_hosts": []byte("x")}); err == nil {
		t.Fatal("ssh without a key accepted")
	}
}

func TestWriterReopensToReleaseMemory(t *testing.T) {
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	url, _ := remote.CreateRepo("reopen", "main")
	bare := remote.RepoDir("reopen")
	// A failed refetch keeps the current repository and logs it: the logs tell whether it worked.
	logs := &testenv.SyncBuffer{}
	w := New(Config{URL: url, Branch: "main", Committer: Signature{"Mirror", "mirror@example.com"}, ReopenAfter: 1, Egress: localEgress(t)})
	rctx, cancel := context.WithCancel(logf.IntoContext(context.Background(), funcr.New(func(prefix, args string) { fmt.Fprintln(logs, prefix+" "+args) }, funcr.Options{})))
	done := make(chan struct{})
	go func() { _ = w.Run(rctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	ctx := context.Background()
	for i, name := range []string{"a", "b", "c"} {
		_ = w.Enqueue(ctx, upsert("ns/core/configmaps/"+name+".yaml", name+"\n", fmt.Sprint(i)))
		waitCommits(t, bare, i+1)
	}
	if files := gitOut(t, "", "--git-dir", bare, "ls-tree", "-r", "--name-only", "main"); files != "ns/core/configmaps/a.yaml\nns/core/configmaps/b.yaml\nns/core/configmaps/c.yaml" {
		t.Fatalf("files after reopening between pushes:\n%s", files)
	}
	gitOut(t, "", "--git-dir", bare, "fsck", "--strict")
	if strings.Contains(logs.String(), "keeping the current one") {
		t.Fatalf("the writer could not refetch the repository:\n%s", logs)
	}
}

func TestCloseWindowCommitsTheTargetWithMessageAndAuthor(t *testing.T) {
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	url, _ := remote.CreateRepo("close", "main")
	bare := remote.RepoDir("close")
	rec := &recorder{}
	// A window far longer than the test: only CloseWindow can commit.
	w, _ := startWriter(t, Config{URL: url, Branch: "main", Committer: Signature{"Mirror", "mirror@example.com"}, Window: time.Hour, Cursors: rec})
	ctx := context.Background()
	alice := &Signature{"Alice", "alice@example.com"}
	bob := upsert("site/ns/core/configmaps/b.yaml", "b\n", "2")
	bob.Change.Author = &Signature{"Bob", "bob@example.com"}
	other := upsert("other/ns/core/configmaps/x.yaml", "x\n", "7")
	other.Target, other.Cursor.TargetUID = "o", "o"
	own := upsert("site/ns/core/configmaps/c.yaml", "c\n", "3")
	own.Change.Author = alice
	for _, op := range []Op{upsert("site/ns/core/configmaps/a.yaml", "a\n", "1"), bob, other, own} {
		if err := w.Enqueue(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	if got := rec.get("t/configmaps/ns"); got != "" {
		t.Fatalf("cursor recorded before any push: %q", got)
	}
	res, err := w.CloseWindow(ctx, Command{Target: "t", Path: "/site/", Message: "Release 1: landing page", Author: alice})
	if err != nil {
		t.Fatal(err)
	}
	tip := gitOut(t, "", "--git-dir", bare, "rev-parse", "main")
	if res.Commit != tip || res.Author != *alice || len(res.Commits) != 4 || res.Commits[3] != tip {
		t.Fatalf("result = %+v, tip %s", res, tip)
	}
	// The unattributed change stays the committer's, Bob's keeps its author and the other
	// target its usual commit; the command's commit (Alice's own change) is the tip, with the
	// message as given.
	log := gitOut(t, "", "--git-dir", bare, "log", "--reverse", "--format=%an|%cn|%s", "-4", "main")
	if log != "Mirror|Mirror|[CREATE] v1/configmaps/ns/a\nBob|Mirror|[CREATE] v1/configmaps/ns/b\nMirror|Mirror|[CREATE] v1/configmaps/ns/x\nAlice|Mirror|Release 1: landing page" {
		t.Fatalf("log:\n%s", log)
	}
	if files := gitOut(t, "", "--git-dir", bare, "show", "--format=", "--name-only", "main"); files != "site/ns/core/configmaps/c.yaml" {
		t.Fatalf("command commit files: %q", files)
	}
	if rec.get("t/configmaps/ns") != "3" || rec.get("o/configmaps/ns") != "7" {
		t.Fatalf("cursors after the push: %v", rec.rv)
	}

	// Nothing pending: no empty commit, an empty Commit.
	res, err = w.CloseWindow(ctx, Command{Target: "t", Path: "site", Message: "again", Author: alice})
	if err != nil || res.Commit != "" || len(res.Commits) != 0 {
		t.Fatalf("empty close = %+v, %v", res, err)
	}
	// An unchanged file is nothing to commit either; without an author the committer authors.
	_ = w.Enqueue(ctx, upsert("site/ns/core/configmaps/a.yaml", "a\n", "8"))
	_ = w.Enqueue(ctx, upsert("site/ns/core/configmaps/d.yaml", "d\n", "9"))
	res, err = w.CloseWindow(ctx, Command{Target: "t", Path: "site", Message: "by the committer"})
	if err != nil || res.Author.Name != "Mirror" {
		t.Fatalf("close = %+v, %v", res, err)
	}
	if got := gitOut(t, "", "--git-dir", bare, "log", "-1", "--format=%H|%an|%B", "main"); got != res.Commit+"|Mirror|by the committer\n\nAttribution: absent" {
		t.Fatalf("last commit = %q", got)
	}
	if rec.get("t/configmaps/ns") != "9" {
		t.Fatalf("cursor = %q", rec.get("t/configmaps/ns"))
	}
}

func TestCloseWindowAfterStop(t *testing.T) {
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	url, _ := remote.CreateRepo("stopped", "main")
	w, cancel := startWriter(t, Config{URL: url, Branch: "main", Committer: Signature{"Mirror", "mirror@example.com"}, Window: time.Hour})
	cancel()
	ctx, done := context.WithTimeout(context.Background(), 10*time.Second)
	defer done()
	if _, err := w.CloseWindow(ctx, Command{Message: "m"}); !errors.Is(err, ErrWriterStopped) {
		t.Fatalf("err = %v, want ErrWriterStopped", err)
	}
}

func TestCommandOrderKeepsSamePathOrder(t *testing.T) {
	committer := Signature{"Mirror", "mirror@example.com"}
	alice := &Signature{"Alice", "a@example.com"}
	cmd := &Command{Target: "t", Path: "site", Author: alice}
	bob := upsert("site/a.yaml", "b\n", "2")
	bob.Change.Author = &Signature{"Bob", "b@example.com"}
	mine := upsert("site/a.yaml", "a\n", "1")
	mine.Change.Author = alice
	// Bob wrote after the command's change of the same file: moving his commit first would
	// leave the older content at the tip, so the order stays.
	if got := cmd.order([]Op{mine, bob}, committer); got[0].Cursor.RV != "1" {
		t.Fatalf("order changed on a shared path: %v", got)
	}
	// A sweep of the target's folder after the command's change conflicts too.
	sweep := Op{Kind: OpSweep, SweepDir: "site", Change: Change{Author: bob.Change.Author}}
	if got := cmd.order([]Op{mine, sweep}, committer); got[0].Kind != OpUpsert {
		t.Fatalf("order changed before a sweep: %v", got)
	}
	// Different files: the command's change moves to the end.
	other := upsert("site/b.yaml", "b\n", "3")
	other.Change.Author = bob.Change.Author
	if got := cmd.order([]Op{mine, other}, committer); got[1].Cursor.RV != "1" {
		t.Fatalf("order = %v", got)
	}
	// Folder boundaries: "site-2" is not under "site".
	byAlice := func(p string) Op { op := upsert(p, "", "4"); op.Change.Author = alice; return op }
	if cmd.claims(byAlice("site-2/a.yaml"), committer) || !cmd.claims(byAlice("site/x/a.yaml"), committer) {
		t.Fatal("claims ignores folder boundaries")
	}
	if !(&Command{Target: "t"}).claims(upsert("any/a.yaml", "", "6"), committer) {
		t.Fatal("a root target without an author does not claim its committer's files")
	}
	if cmd.claims(upsert("site/x/b.yaml", "", "7"), committer) {
		t.Fatal("an unattributed change is credited to the command's author")
	}
	foreign := byAlice("site/x/c.yaml")
	foreign.Target = "u"
	if (&Command{Target: "t", Author: alice}).claims(foreign, committer) {
		t.Fatal("a command claims another target's change")
	}
}

// TestCloseWindowClaimsOnlyItsTargetsOwnAuthor: a command commits only its own GitTarget's
// changes made by its author. Another target's pending change in a sub-folder of the command's
// path, and an unattributed change of its own target, are committed as they would have been
// (by the committer, with their usual messages), never credited to the command's author.
func TestCloseWindowClaimsOnlyItsTargetsOwnAuthor(t *testing.T) {
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	url, _ := remote.CreateRepo("claims", "main")
	bare := remote.RepoDir("claims")
	w, _ := startWriter(t, Config{URL: url, Branch: "main", Committer: Signature{"Mirror", "mirror@example.com"}, Window: time.Hour})
	ctx := context.Background()
	alice := &Signature{"Alice", "alice@example.com"}
	nested := upsert("site/blog/ns/core/configmaps/post.yaml", "post\n", "5")
	nested.Target, nested.Cursor.TargetUID = "blog", "blog"
	nested.Change.Author = alice
	unattributed := upsert("site/ns/core/configmaps/a.yaml", "a\n", "1")
	unattributed.Target = "t"
	own := upsert("site/ns/core/configmaps/c.yaml", "c\n", "3")
	own.Target, own.Change.Author = "t", alice
	for _, op := range []Op{nested, unattributed, own} {
		if err := w.Enqueue(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	res, err := w.CloseWindow(ctx, Command{Target: "t", Path: "site", Message: "Release 1", Author: alice})
	if err != nil {
		t.Fatal(err)
	}
	if files := gitOut(t, "", "--git-dir", bare, "show", "--format=", "--name-only", res.Commit); files != "site/ns/core/configmaps/c.yaml" {
		t.Fatalf("the command's commit holds %q, want only its own target's change by its author", files)
	}
	log := gitOut(t, "", "--git-dir", bare, "log", "--reverse", "--format=%an|%s", "main")
	for _, want := range []string{"Alice|[CREATE] v1/configmaps/ns/post", "Mirror|[CREATE] v1/configmaps/ns/a", "Alice|Release 1"} {
		if !strings.Contains(log, want) {
			t.Fatalf("log lacks %q:\n%s", want, log)
		}
	}
}

// TestStoppedWriterClosesItsConnections pushes a change, stops the writer, and checks that the
// remote sees every connection of the writer's closed at once, not when the idle timeout ends
// them: a mirror that adds and removes targets keeps no sockets, nor their buffers, of the
// writers that are gone.
func TestStoppedWriterClosesItsConnections(t *testing.T) {
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	url, err := remote.CreateRepo("conns", "main")
	if err != nil {
		t.Fatal(err)
	}
	w := New(Config{URL: url, Branch: "main", Committer: Signature{"Mirror", "mirror@example.com"}, Window: 10 * time.Millisecond, Egress: localEgress(t)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	if err := w.Enqueue(ctx, upsert("m/ns/core/configmaps/a.yaml", "a: 1\n", "1")); err != nil {
		t.Fatal(err)
	}
	waitCommits(t, remote.RepoDir("conns"), 1)
	if n := remote.OpenConnections(); n == 0 {
		t.Fatal("the remote holds no connection of a running writer that just pushed: the count sees nothing")
	}
	cancel()
	<-done
	testenv.Eventually(t, 5*time.Second, func() error {
		if n := remote.OpenConnections(); n > 0 {
			return fmt.Errorf("%d connections of the stopped writer still open", n)
		}
		return nil
	})
}

// TestWriterForgetsEarlierPushes: a writer pushing commit after commit keeps the objects of its
// tip's snapshot, not those of every commit it pushed (before, 150 pushes left over 900 objects
// in memory until ReopenAfter), and builds on a remote that moved after the trim.
func TestWriterForgetsEarlierPushes(t *testing.T) {
	const pushes = 150
	remote := testenv.GitRemote(t, servers.GitRemoteOptions{})
	url, _ := remote.CreateRepo("trim", "main")
	bare := remote.RepoDir("trim")
	w := New(Config{URL: url, Branch: "main", Committer: Signature{"Mirror", "mirror@example.com"}, Egress: localEgress(t)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	for i := range pushes {
		_ = w.Enqueue(ctx, upsert(fmt.Sprintf("ns/core/configmaps/cm-%d.yaml", i%20), fmt.Sprintf("v%d\n", i), fmt.Sprint(i+1)))
		waitCommits(t, bare, i+1)
	}
	// Someone else pushes; the writer fetches on top of its trimmed store and builds on theirs.
	pushReadme(t, url)
	_ = w.Enqueue(ctx, upsert("ns/core/configmaps/last.yaml", "last\n", fmt.Sprint(pushes+1)))
	waitCommits(t, bare, pushes+2)
	gitOut(t, "", "--git-dir", bare, "fsck", "--strict")

	cancel()
	<-done
	// The snapshot: a commit, the root tree and the trees of ns, core and configmaps; the store
	// may hold twice what the last trim kept and trimSlack more before it trims again.
	if n := len(w.store.Objects); n > 2*8+trimSlack {
		t.Fatalf("after %d pushes the writer holds %d objects, want at most %d", pushes+1, n, 2*8+trimSlack)
	}
}
