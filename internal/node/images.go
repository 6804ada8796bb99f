package node

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/siteops/siteops/internal/image"
)

// PauseImage is the sandbox image the node pins; it is built from BinDir/pause (hack/pause).
const PauseImage = "siteops-pause:0.1.0"

// buildPauseImage writes the pause image as a docker-archive into dir and returns its path.
func buildPauseImage(binDir, dir, caBundle string) (string, error) {
	img, err := image.Build(image.Spec{Binary: filepath.Join(binDir, "pause"), Name: "pause", CABundle: caBundle})
	if err != nil {
		return "", fmt.Errorf("build the pause image: %w", err)
	}
	file := filepath.Join(dir, "pause.tar")
	if _, err := image.WriteArchive(file, PauseImage, img); err != nil {
		return "", err
	}
	return file, nil
}

// importImages loads docker-archive tarballs into containerd's Kubernetes namespace, unpacked
// for its snapshotter, so pods run them without a pull.
func (n *Node) importImages(ctx context.Context, files ...string) error {
	for _, f := range files {
		if err := run(ctx, filepath.Join(n.binDir, "ctr"), "--address", n.containerdSocket(), "--namespace", "k8s.io",
			"images", "import", "--local", "--snapshotter", "overlayfs", f); err != nil {
			return fmt.Errorf("import image %s into the node: %w", f, err)
		}
	}
	return nil
}
