package servers_test

import (
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/siteops/siteops/internal/servers"
)

// A push larger than git's http.postBuffer arrives chunked; the remote takes it, behind basic
// auth, and still announces it.
func TestGitRemoteTakesLargePushes(t *testing.T) {
	remote, _ := announcingRemote(t, servers.GitRemoteOptions{Username: "git", Password: "pw"})
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
		gitIn(t, work, args...)
	}
	out, err := exec.Command("git", "--git-dir", remote.RepoDir("large"), "cat-file", "-s", "main:blob.bin").Output()
	if err != nil || strings.TrimSpace(string(out)) != "3145728" {
		t.Fatalf("blob.bin on the remote: %q, %v", out, err)
	}
	if sent, lastErr := remote.PushEvents(); sent != 1 || lastErr != nil {
		t.Fatalf("%d push events sent, last error %v; want 1", sent, lastErr)
	}
}

// A refusing remote answers 503 to a clone and serves it again once the fault is cleared.
func TestGitRemoteRefusesWhileFaulted(t *testing.T) {
	remote, _ := announcingRemote(t, servers.GitRemoteOptions{})
	url, err := remote.CreateRepo("faulty", "main")
	if err != nil {
		t.Fatal(err)
	}
	lsRemote := func() (string, error) {
		out, err := exec.Command("git", "ls-remote", url).CombinedOutput()
		return string(out), err
	}
	if out, err := lsRemote(); err != nil {
		t.Fatalf("ls-remote before the fault: %v: %s", err, out)
	}
	remote.SetFault(&servers.GitFault{Refuse: true})
	if out, err := lsRemote(); err == nil || !strings.Contains(out, "503") {
		t.Fatalf("ls-remote of a refusing remote: %v: %s; want a 503", err, out)
	}
	remote.SetFault(nil)
	if out, err := lsRemote(); err != nil {
		t.Fatalf("ls-remote after the fault: %v: %s", err, out)
	}
}
