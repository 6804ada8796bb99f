package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/siteops/siteops/internal/devenv"
)

// webUI serves the web UI as the admin, as `siteops ui` would, and saves a screenshot of its
// overview with Debian's Chromium when it is installed (make test-deps installs it).
func webUI(ctx context.Context, env *devenv.Env, out io.Writer) (string, error) {
	url, err := env.StartUI(ctx)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(out, "web UI, as the admin: %s\n", url)
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		return "serving at " + url + "; no Chromium here for a screenshot (make test-deps installs it)", nil
	}
	profile, err := os.MkdirTemp("", "siteops-demo-chromium")
	if err != nil {
		return "", err
	}
	defer func() {
		if err := os.RemoveAll(profile); err != nil {
			fmt.Fprintf(out, "    Chromium's profile is left in %s: %v\n", profile, err)
		}
	}()
	shot := filepath.Join(env.StateDir, "ui-overview.png")
	// The machine's network is closed: no background traffic, updates or sync.
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-quic",
		"--user-data-dir="+profile, "--window-size=1280,800", "--screenshot="+shot, url)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("screenshot of the web UI: %w: %s", err, lastLine(msg))
	}
	if st, err := os.Stat(shot); err != nil || st.Size() == 0 {
		return "", fmt.Errorf("screenshot of the web UI: Chromium wrote no picture to %s", shot)
	}
	return "serving at " + url + "; overview screenshot " + shot, nil
}

// lastLine is the last non-empty line of a command's output.
func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if lines[i] != "" {
			return lines[i]
		}
	}
	return ""
}
