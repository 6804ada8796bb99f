// Command image builds the siteops container images from the static binaries `make image`
// compiled, as docker-archive tarballs that `ctr images import` and `docker load` read, and
// prints the references to use.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/siteops/siteops/internal/image"
)

// images are the project's images: the operator, and the site runtime for development and tests.
var images = []struct {
	repository, binary string
	args               []string
}{
	{repository: "siteops-manager", binary: "siteops-manager"},
	{repository: "siteops-site", binary: "siteops", args: []string{"site", "serve"}},
}

func main() {
	binDir := flag.String("bin-dir", "bin/linux-amd64", "folder with the statically linked binaries")
	out := flag.String("out", "bin/images", "folder the image archives are written to")
	version := flag.String("version", "", "image tag (the chart's appVersion)")
	ca := flag.String("ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "CA bundle shipped in the images")
	var push image.PushOptions
	flag.StringVar(&push.Registry, "push", "", "also push the images to this registry (host[:port][/prefix]), with the docker config's credentials")
	flag.BoolVar(&push.Insecure, "insecure", false, "allow plain HTTP to the registry of --push")
	flag.Parse()
	if err := run(*binDir, *out, *version, *ca, push); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(binDir, out, version, ca string, push image.PushOptions) error {
	if version == "" {
		return fmt.Errorf("--version is required (the chart's appVersion)")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, i := range images {
		img, err := image.Build(image.Spec{
			Binary: filepath.Join(binDir, i.binary), Name: i.binary, Args: i.args, CABundle: ca,
			Labels: map[string]string{"org.opencontainers.image.title": i.repository, "org.opencontainers.image.version": version},
		})
		if err != nil {
			return fmt.Errorf("%s: %w", i.repository, err)
		}
		ref := i.repository + ":" + version
		file := filepath.Join(out, i.repository+".tar")
		digest, err := image.WriteArchive(file, ref, img)
		if err != nil {
			return err
		}
		id, err := img.ConfigName()
		if err != nil {
			return err
		}
		fmt.Printf("%s\t%s\tdigest %s\timage ID %s\n", ref, file, digest, id)
		if push.Registry != "" {
			pushed, err := image.Push(context.Background(), img, i.repository, version, push)
			if err != nil {
				return err
			}
			fmt.Printf("pushed\t%s\n", pushed)
		}
	}
	return nil
}
