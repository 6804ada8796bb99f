package cli

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siteops/siteops/internal/mirror/verify"
)

// mirrorRepo makes a repository with the real git: one mirrored change of ConfigMap web/a,
// authored by author and naming audit event A1.
func mirrorRepo(t *testing.T, author string) string {
	t.Helper()
	dir := t.TempDir()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(),
			"GIT_AUTHOR_NAME="+author, "GIT_AUTHOR_EMAIL="+author+"@users.noreply.invalid", "GIT_AUTHOR_DATE=2026-12-01T10:00:05Z",
			"GIT_COMMITTER_NAME=Mirror Bot", "GIT_COMMITTER_EMAIL=mirror@example.com", "GIT_COMMITTER_DATE=2026-12-01T10:00:05Z")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	git("init", "-q", "-b", "main")
	p := filepath.Join(dir, "clusters/prod/web/core/configmaps/a.yaml")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("apiVersion: v1\nkind: ConfigMap\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", ".")
	git("commit", "-q", "-m", "[CREATE] v1/configmaps/web/a\n\nAudit-ID: A1\nAttribution: exact_user\nCluster: prod")
	return dir
}

func auditLogFile(t *testing.T) string {
	t.Helper()
	line := `{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"RequestResponse","auditID":"A1","stage":"ResponseComplete",` +
		`"requestURI":"/api/v1/namespaces/web/configmaps","verb":"create","user":{"username":"alice"},` +
		`"objectRef":{"resource":"configmaps","namespace":"web","name":"a","apiVersion":"v1"},"responseStatus":{"code":201},` +
		`"requestReceivedTimestamp":"2026-12-01T10:00:00.000000Z","stageTimestamp":"2026-12-01T10:00:00.100000Z"}` + "\n"
	p := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(p, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func runMirrorVerify(args ...string) (string, error) {
	cmd := NewRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append([]string{"mirror", "verify"}, args...))
	err := cmd.Execute()
	return out.String(), err
}

func TestMirrorVerifyCommand(t *testing.T) {
	log := auditLogFile(t)
	out, err := runMirrorVerify("--repo", mirrorRepo(t, "alice"), "--audit-log", log)
	if err != nil || !strings.Contains(out, "exact_user") || !strings.Contains(out, "100.0%") {
		t.Fatalf("a correct history: %v\n%s", err, out)
	}
	wrong := mirrorRepo(t, "bob")
	out, err = runMirrorVerify("--repo", wrong, "--audit-log", log)
	if !errors.Is(err, verify.ErrMismatch) || !strings.Contains(out, "mismatches (1):") || !strings.Contains(out, "author bob <bob@users.noreply.invalid>, audit log: alice <alice@users.noreply.invalid>") {
		t.Fatalf("a wrong author: %v\n%s", err, out)
	}
	if _, err := runMirrorVerify("--repo", wrong, "--audit-log", log, "--fail-on-mismatch=false"); err != nil {
		t.Fatalf("--fail-on-mismatch=false: %v", err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--audit-log", log}, "--repo and --audit-log are required"},
		{[]string{"--repo", wrong, "--audit-log", log, "--since", "yesterday"}, `--since "yesterday"`},
		{[]string{"--repo", wrong, "--audit-log", filepath.Join(t.TempDir(), "none")}, "open the audit log"},
		{[]string{"--repo", filepath.Join(t.TempDir(), "none"), "--audit-log", log}, "clone"},
	} {
		if _, err := runMirrorVerify(tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"":                     {},
		"2h":                   now.Add(-2 * time.Hour),
		"2026-12-01T10:00:00Z": time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC),
	} {
		if got, err := parseSince(in, now); err != nil || !got.Equal(want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := parseSince("-2h", now); err == nil {
		t.Error("a negative age was accepted")
	}
}
