package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Git runs git in dir with a fixed test identity, failing the test on error, and returns its
// trimmed output.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	out, err := RunGit(dir, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// RunGit runs git in dir with a fixed test identity and returns its trimmed output, or an error
// holding the output.
func RunGit(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com", "GIT_TERMINAL_PROMPT=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("git %v: %w\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// CommitFiles writes files (slash path → content) into the work tree dir, commits them with msg
// and returns the new HEAD.
func CommitFiles(t testing.TB, dir, msg string, files map[string]string) string {
	t.Helper()
	sha, err := WriteCommit(dir, msg, files)
	if err != nil {
		t.Fatal(err)
	}
	return sha
}

// WriteCommit is CommitFiles returning its error.
func WriteCommit(dir, msg string, files map[string]string) (string, error) {
	for p, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			return "", err
		}
	}
	if _, err := RunGit(dir, "add", "-A"); err != nil {
		return "", err
	}
	if _, err := RunGit(dir, "commit", "-q", "-m", msg); err != nil {
		return "", err
	}
	return RunGit(dir, "rev-parse", "HEAD")
}
