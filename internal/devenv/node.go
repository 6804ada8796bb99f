package devenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/siteops/siteops/internal/node"
	"github.com/siteops/siteops/internal/servers"
)

// SiteImage names the site-runtime image archive (bin/images/siteops-site.tar) that the demo's
// pods run.
const SiteImage = "siteops-site"

// DefaultImagesDir is where `make image` writes the image archives a node imports.
const DefaultImagesDir = "bin/images"

// Image is an image archive imported into the node.
type Image struct {
	// Archive is the docker-archive tarball.
	Archive string
	// Ref is the reference it is tagged with, for a container's image (imagePullPolicy Never).
	Ref string
}

// CheckNode reports why a real node cannot run here (not root, the node's programs or the
// image archives missing), with what to do; nil when it can.
func CheckNode(imagesDir string) error {
	if os.Geteuid() != 0 {
		return errors.New("a real node needs root (network namespaces, mounts, cgroups)")
	}
	if err := node.CheckBinaries(servers.AssetsDir()); err != nil {
		return err
	}
	for _, b := range []string{"kube-scheduler", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(servers.AssetsDir(), b)); err != nil {
			return fmt.Errorf("%s not found in %s: run `make node-tools`", b, servers.AssetsDir())
		}
	}
	images, err := ImageArchives(imagesDir)
	if err != nil {
		return err
	}
	if _, ok := images[SiteImage]; !ok {
		return fmt.Errorf("no %s.tar in %s: run `make image`", SiteImage, imagesDir)
	}
	return nil
}

// ImageArchives reads the tags of the docker-archive tarballs in dir, by file name without .tar.
func ImageArchives(dir string) (map[string]Image, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.tar"))
	if err != nil {
		return nil, err
	}
	out := map[string]Image{}
	for _, f := range files {
		abs, err := filepath.Abs(f)
		if err != nil {
			return nil, err
		}
		m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(abs) })
		if err != nil || len(m) == 0 || len(m[0].RepoTags) == 0 {
			return nil, fmt.Errorf("image archive %s holds no tagged image: %w; run `make image` again", abs, err)
		}
		out[strings.TrimSuffix(filepath.Base(f), ".tar")] = Image{Archive: abs, Ref: m[0].RepoTags[0]}
	}
	return out, nil
}

// nodeAPIServer prepares what the API server needs for a node (see node.APIServerFlags): a
// client certificate kubelets trust, a serving certificate naming the `kubernetes` Service so
// pods verify it, and the ServiceAccount admission plugin on so pods get tokens.
func nodeAPIServer(dir string) (func(*envtest.Environment), *node.APIAccess, error) {
	access, err := node.NewAPIAccess(filepath.Join(dir, "kubelet-client"))
	if err != nil {
		return nil, nil, err
	}
	certs, err := node.NewAPIServerCerts(filepath.Join(dir, "apiserver"))
	if err != nil {
		return nil, nil, fmt.Errorf("API server certificates for a node: %w", err)
	}
	return func(env *envtest.Environment) {
		api := env.ControlPlane.GetAPIServer()
		api.CertDir = certs.Dir
		api.CA = certs.CAPEM
		args := api.Configure()
		for k, v := range node.APIServerFlags(access) {
			args.Set(k, v)
		}
		// envtest turns ServiceAccount off; with a node, kube-controller-manager creates the
		// default ServiceAccounts it needs.
		args.Set("disable-admission-plugins", "StorageObjectInUseProtection")
	}, access, nil
}

// startNode runs kube-scheduler and kube-controller-manager, then a node joined to the API
// server with every image archive imported, registering their stops with env.
func startNode(ctx context.Context, env *Env, stateDir string, access *node.APIAccess, images map[string]Image) error {
	// What nodes of killed processes left (network namespaces, veths, cgroups).
	if err := node.Sweep(ctx); err != nil {
		return fmt.Errorf("remove what an earlier node left: %w", err)
	}
	ctl, err := node.StartControllers(ctx, env.api.KubeConfig, filepath.Join(stateDir, "controllers"), "")
	if err != nil {
		return fmt.Errorf("start kube-scheduler and kube-controller-manager: %w", err)
	}
	env.onStop(ctl.Stop)
	env.addLog("kube-scheduler", filepath.Join(ctl.Dir, "kube-scheduler.log"))
	env.addLog("kube-controller-manager", filepath.Join(ctl.Dir, "kube-controller-manager.log"))

	dir, err := nodeDir(stateDir)
	if err != nil {
		return err
	}
	archives := make([]string, 0, len(images))
	for _, img := range images {
		archives = append(archives, img.Archive)
	}
	n, err := node.Start(ctx, node.Options{KubeConfig: env.api.KubeConfig, Dir: dir, Images: archives, APIAccess: access})
	if err != nil {
		return fmt.Errorf("start the node: %w", err)
	}
	env.onStop(func() error {
		stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err := n.Stop(stopCtx)
		if left := n.Leftovers(); len(left) > 0 {
			err = errors.Join(err, fmt.Errorf("the node left behind: %s", strings.Join(left, "; ")))
		}
		return err
	})
	env.Node, env.Images = n, images
	for _, name := range []string{"node", "containerd", "kubelet", "kube-proxy", "coredns"} {
		env.addLog(name, filepath.Join(dir, name+".log"))
	}
	return nil
}

// nodeDir is the node's state folder: <state>/node, or a folder under the system's temporary
// folder when that path is too long for containerd's socket (107 bytes).
func nodeDir(stateDir string) (string, error) {
	dir := filepath.Join(stateDir, "node")
	if len(filepath.Join(dir, "containerd.sock")) > 100 {
		return os.MkdirTemp("", "siteops-node-")
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", fmt.Errorf("remove the last node's folder: %w", err)
	}
	return dir, os.MkdirAll(dir, 0o700)
}
