package servers_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/siteops/siteops/internal/decofile/push"
	"github.com/siteops/siteops/internal/servers"
)

type keysSeen struct {
	mu   sync.Mutex
	keys [][]string
}

func (k *keysSeen) Trigger(_ context.Context, keys []string) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.keys = append(k.keys, keys)
	return 1, nil
}

// announcingRemote starts a push receiver that records what it is asked for, and a git remote
// (o, with a fresh Root) announcing every push to it; both stop when the test ends.
func announcingRemote(t *testing.T, o servers.GitRemoteOptions) (*servers.GitRemote, *keysSeen) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	seen := &keysSeen{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rcv, err := push.NewReceiver(push.Config{Listener: l, Secret: []byte("dev-secret"), Trigger: seen})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = rcv.Start(ctx) }()
	o.Root, o.PushEventURL, o.PushEventSecret = t.TempDir(), "http://"+l.Addr().String()+push.Path, []byte("dev-secret")
	remote, err := servers.StartGitRemote(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = remote.Stop() })
	return remote, seen
}

// gitIn runs git in dir with a test identity, failing the test on error.
func gitIn(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v %s", args, err, out)
	}
}

// Every push to the remote is announced to a push receiver, signed with the shared secret,
// before `git push` returns.
func TestGitRemoteAnnouncesPushes(t *testing.T) {
	remote, seen := announcingRemote(t, servers.GitRemoteOptions{})
	url, err := remote.CreateRepo("site", "main")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	git := func(args ...string) { gitIn(t, work, args...) }
	git("init", "-q", "-b", "main")
	for i, content := range []string{"1", "2"} {
		if err := os.WriteFile(filepath.Join(work, "a.json"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		git("add", "-A")
		git("commit", "-q", "-m", "c")
		git("push", "-q", url, "HEAD:main")
		sent, lastErr := remote.PushEvents()
		if sent != i+1 || lastErr != nil {
			t.Fatalf("after push %d: %d events sent, last error %v", i+1, sent, lastErr)
		}
	}
	id, _ := push.RepoIdentity(url)
	seen.mu.Lock()
	defer seen.mu.Unlock()
	if len(seen.keys) != 2 || strings.Join(seen.keys[1], ",") != push.GitKey(id, "main") {
		t.Fatalf("the receiver was asked for %q, want %s twice", seen.keys, push.GitKey(id, "main"))
	}
}
