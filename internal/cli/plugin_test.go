package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// helpOf runs `<args> --help` on a root command built as if the binary were called arg0.
func helpOf(t *testing.T, arg0 string, args ...string) string {
	t.Helper()
	saved := os.Args
	defer func() { os.Args = saved }()
	os.Args = []string{arg0}
	root := NewRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append(args, "--help"))
	if err := root.Execute(); err != nil {
		t.Fatalf("%s %v --help: %v", arg0, args, err)
	}
	return out.String()
}

func TestKubectlPluginName(t *testing.T) {
	help := helpOf(t, "/usr/local/bin/kubectl-siteops", "decofile", "wait")
	if !strings.Contains(help, "kubectl siteops decofile wait") {
		t.Errorf("as kubectl-siteops the usage should read `kubectl siteops decofile wait`, got:\n%s", help)
	}
	help = helpOf(t, "/usr/local/bin/siteops", "decofile", "wait")
	if strings.Contains(help, "kubectl") || !strings.Contains(help, "siteops decofile wait") {
		t.Errorf("as siteops the usage should read `siteops decofile wait`, got:\n%s", help)
	}
}

// TestKubectlPluginBinary builds the CLI as `make install` installs it and runs it by the plugin
// name (through kubectl when it is installed).
func TestKubectlPluginBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CLI")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "kubectl-siteops")
	build := exec.Command("go", "build", "-o", bin, "./cmd/siteops")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := func(name string, args ...string) string {
		cmd := exec.Command(name, args...)
		cmd.Env = append(os.Environ(), "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	if out := run(bin, "version"); !strings.HasPrefix(out, "siteops ") {
		t.Errorf("kubectl-siteops version = %q", out)
	}
	if out := run(bin, "--help"); !strings.Contains(out, "kubectl siteops [command]") {
		t.Errorf("kubectl-siteops --help does not show the plugin usage:\n%s", out)
	}
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		if out := run(kubectl, "siteops", "version"); !strings.HasPrefix(out, "siteops ") {
			t.Errorf("kubectl siteops version = %q", out)
		}
	} else {
		t.Log("kubectl is not installed; ran the plugin binary directly")
	}
}
