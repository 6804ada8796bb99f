package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/siteops/siteops/internal/devenv"
)

// TestDevNodeFlagIsOneFlag: dev up and dev demo take --node the same way (auto, on or off;
// alone it means on), and no usage line renders a backquoted phrase as the flag's value.
func TestDevNodeFlagIsOneFlag(t *testing.T) {
	for _, args := range [][]string{{"dev", "up"}, {"dev", "demo"}} {
		cmd, _, err := NewRootCommand().Find(args)
		if err != nil {
			t.Fatal(err)
		}
		f := cmd.Flags().Lookup("node")
		if f == nil || f.Value.Type() != "string" || f.NoOptDefVal != "on" {
			t.Fatalf("%s --node: %+v, want a string flag whose bare form is on", strings.Join(args, " "), f)
		}
		usage := cmd.Flags().FlagUsages()
		for _, want := range []string{"--images string", "--node string[=\"on\"]"} {
			if !strings.Contains(usage, want) {
				t.Errorf("%s usage lacks %q:\n%s", strings.Join(args, " "), want, usage)
			}
		}
	}
	for mode, want := range map[string]bool{"on": true, "off": false} {
		o := devenv.Options{}
		if err := chooseNode(&o, mode, &bytes.Buffer{}); err != nil || o.Node != want {
			t.Errorf("--node=%s: node %v (%v), want %v", mode, o.Node, err, want)
		}
	}
	if err := chooseNode(&devenv.Options{}, "yes", &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "want auto, on or off") {
		t.Errorf("--node=yes: %v", err)
	}
}
