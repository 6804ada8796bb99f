package cli

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/encode"
	"github.com/siteops/siteops/internal/decofile/encode/sample"
	"github.com/siteops/siteops/internal/decofile/source/ghtest"
)

func runBuild(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := NewRootCommand()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append([]string{"decofile", "build"}, args...))
	err := cmd.Execute()
	return out.String(), err
}

func TestDecofileBuildDirYAML(t *testing.T) {
	dir := t.TempDir()
	for p, c := range map[string]string{".deco/blocks/Campaign%20Timer.json": `{"b":1,"a":"x & y"}`, ".deco/blocksX/no.json": `{}`} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := runBuild(t, "--dir", dir, "--path", ".deco/blocks", "-o", "yaml", "--name", "shop", "-n", "sites")
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict([]byte(out), &cm); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if cm.Kind != "ConfigMap" || cm.Name != "decofile-shop" || cm.Namespace != "sites" || cm.Labels[decov1.LabelDecofile] != "shop" {
		t.Fatalf("object %+v", cm.ObjectMeta)
	}
	if got := cm.Data[decov1.KeyJSON]; got != `{"Campaign Timer":{"a":"x & y","b":1}}` || cm.Data[decov1.KeyTimestamp] == "" {
		t.Fatalf("data %v", cm.Data)
	}
}

func TestDecofileBuildZipSummaryAndJSON(t *testing.T) {
	files := map[string]string{}
	for n, b := range sample.Generate(sample.Standard) {
		files[".deco/blocks/"+n] = string(b)
	}
	zipPath := filepath.Join(t.TempDir(), "site.zip")
	if err := os.WriteFile(zipPath, ghtest.Zip("site-abc123", files), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runBuild(t, "--zip", zipPath, "--path", ".deco/blocks", "-o", "summary")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"blocks:       360", "format:       bin (decofile.bin)", "ratio:", "encode time:"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	out, err = runBuild(t, "--zip", zipPath, "--path", "site-abc123/.deco/blocks", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.Unmarshal([]byte(out), &cm); err != nil {
		t.Fatal(err)
	}
	merged, err := encode.Decode(decov1.FormatBin, cm.Data[decov1.KeyBin], 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	if encode.Hash(merged) != cm.Annotations["deco.sites/content-hash"] {
		t.Fatal("decofile.bin does not decode to the content hash")
	}
}

func TestDecofileBuildErrors(t *testing.T) {
	if _, err := runBuild(t); err == nil {
		t.Fatal("neither --dir nor --zip accepted")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bad.json"), []byte(`{`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := runBuild(t, "--dir", dir); err == nil || !strings.Contains(err.Error(), "bad.json") {
		t.Fatalf("invalid JSON: %v", err)
	}
	noise := make([]byte, 1200<<10)
	_, _ = rand.Read(noise)
	big := `{"a":"` + base64.StdEncoding.EncodeToString(noise) + `"}` // incompressible beyond base64's 6 bits per byte
	if err := os.WriteFile(filepath.Join(dir, "bad.json"), []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runBuild(t, "--dir", dir, "-o", "summary")
	if err == nil || !strings.Contains(err.Error(), "target: s3") || !strings.Contains(out, "fits:         no") {
		t.Fatalf("oversize: %v\n%s", err, out)
	}
}

// TestDecofileBuildTakesTheManagersLimitNames: the limits are the manager's flags by name, and
// the older short names still work, with a deprecation notice.
func TestDecofileBuildTakesTheManagersLimitNames(t *testing.T) {
	dir := t.TempDir()
	for i, name := range []string{"a.json", "b.json"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(`{"n":`+string(rune('0'+i))+`}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, flag := range []string{"--decofile-max-files", "--max-files"} {
		out, err := runBuild(t, "--dir", dir, flag, "1")
		if err == nil || !strings.Contains(err.Error(), "more than 1 block files") {
			t.Errorf("%s 1 with two block files: %v\n%s", flag, err, out)
		}
		if deprecated := strings.Contains(out, "use --decofile-max-files"); deprecated != (flag == "--max-files") {
			t.Errorf("%s: deprecation notice shown %v:\n%s", flag, deprecated, out)
		}
	}
	out, err := runBuild(t, "--dir", dir, "--compression-threshold", "1", "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, decov1.KeyBin) {
		t.Errorf("--compression-threshold 1 did not compress:\n%s", out)
	}
}
