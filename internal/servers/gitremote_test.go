package servers_test

import (
	"context"
	"crypto/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/siteops/siteops/internal/decofile/push"
	"github.com/siteops/siteops/internal/servers"
)

// A push larger than git's http.postBuffer arrives chunked; the remote takes it, behind basic
// auth, and still announces it.
func TestGitRemoteTakesLargePushes(t *testing.T) {
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
	defer cancel()
	go func() { _ = rcv.Start(ctx) }()
	remote, err := servers.StartGitRemote(ctx, servers.GitRemoteOptions{Root: t.TempDir(), Username: "git", Password: "pw",
		PushEventURL: "http://" + l.Addr().String() + push.Path, PushEventSecret: []byte("dev-secret")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = remote.Stop() }()
	if _, err := remote.CreateRepo("large", "main"); err != nil {
		t.Fatal(err)
	}
	url := strings.Replace(remote.RepoURL("large"), "http://", "http://git:pw@", 1)

	work := t.TempDir()
	// Random bytes do not compress: the pack is as large as the file.
	blob := make([]byte, 3<<20)
	_, _ = rand.Read(blob)
	if err := os.WriteFile(filepath.Join(work, "blob.bin"), blob, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"commit", "-q", "-m", "large"}, {"push", "-q", url, "HEAD:main"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	out, err := exec.Command("git", "--git-dir", remote.RepoDir("large"), "cat-file", "-s", "main:blob.bin").Output()
	if err != nil || strings.TrimSpace(string(out)) != "3145728" {
		t.Fatalf("blob.bin on the remote: %q, %v", out, err)
	}
	if sent, lastErr := remote.PushEvents(); sent != 1 || lastErr != nil {
		t.Fatalf("%d push events sent, last error %v; want 1", sent, lastErr)
	}
}
