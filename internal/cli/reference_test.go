package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/cobra/doc"
)

// cliReference is where the generated command reference lives, one page per command.
var cliReference = filepath.Join("..", "..", "docs", "reference", "cli")

// TestCLIReferenceCurrent fails when docs/reference/cli differs from what the commands say of
// themselves (usage, flags, examples); `go test ./internal/cli -run TestCLIReferenceCurrent
// -update` writes it again.
func TestCLIReferenceCurrent(t *testing.T) {
	root := NewRootCommand()
	root.DisableAutoGenTag = true // no date: the pages change only when a command does
	dir := t.TempDir()
	if err := doc.GenMarkdownTree(root, dir); err != nil {
		t.Fatal(err)
	}
	want := readPages(t, dir)
	if *updateGolden {
		if err := os.RemoveAll(cliReference); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(cliReference, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, body := range want {
			if err := os.WriteFile(filepath.Join(cliReference, name), body, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	have := readPages(t, cliReference)
	for name, body := range want {
		if !bytes.Equal(have[name], body) {
			t.Errorf("%s is out of date with the commands: run go test ./internal/cli -run TestCLIReferenceCurrent -update", filepath.Join(cliReference, name))
		}
	}
	for name := range have {
		if _, ok := want[name]; !ok {
			t.Errorf("%s documents no command: run go test ./internal/cli -run TestCLIReferenceCurrent -update", filepath.Join(cliReference, name))
		}
	}
	if _, ok := want["siteops_trace.md"]; len(want) < 20 || !ok {
		t.Errorf("the reference has %d pages, without siteops_trace.md: the command tree was not walked", len(want))
	}
}

// readPages reads the Markdown pages of dir by name; a missing dir has none.
func readPages(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	pages := map[string][]byte{}
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ".md" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		pages[e.Name()] = b
	}
	return pages
}
