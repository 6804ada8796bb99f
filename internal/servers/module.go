package servers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// ModuleFile downloads module (path@version) into the Go module cache and returns the path of rel
// inside it, so tests can install another project's manifests (a CRD) without a committed copy.
// It runs outside this module, so go.mod is never touched.
func ModuleFile(module, rel string) (string, error) {
	tmp, err := os.MkdirTemp("", "module-download-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	cmd := exec.Command("go", "mod", "download", "-json", module)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GO111MODULE=on", "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	_ = json.Unmarshal(out, &info)
	if err != nil {
		return "", fmt.Errorf("go mod download %s: %w: %s %s", module, err, info.Error, stderr.String())
	}
	if info.Error != "" || info.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %s", module, info.Error)
	}
	p := filepath.Join(info.Dir, filepath.FromSlash(rel))
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s has no %s: %w", module, rel, err)
	}
	return p, nil
}
