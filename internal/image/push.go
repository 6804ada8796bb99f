package image

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// PushOptions says where an image archive goes.
type PushOptions struct {
	// Registry is the registry host (host[:port]) with an optional path prefix
	// (registry.example.com/platform).
	Registry string
	// Insecure allows plain HTTP, for a registry on this machine.
	Insecure bool
	// Keychain finds the registry's credentials; nil means the docker config
	// ($DOCKER_CONFIG/config.json or ~/.docker/config.json, and its credential helpers).
	Keychain authn.Keychain
}

// Push uploads img (as Build made it, so the registry serves the digest WriteArchive printed) to
// o.Registry as repository:tag, and returns the reference pushed, pinned to its digest.
func Push(ctx context.Context, img v1.Image, repository, tag string, o PushOptions) (name.Digest, error) {
	var opts []name.Option
	if o.Insecure {
		opts = append(opts, name.Insecure)
	}
	ref, err := name.NewTag(o.Registry+"/"+repository+":"+tag, opts...)
	if err != nil {
		return name.Digest{}, fmt.Errorf("image reference %s/%s:%s: %w", o.Registry, repository, tag, err)
	}
	keychain := o.Keychain
	if keychain == nil {
		keychain = authn.DefaultKeychain
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(keychain)); err != nil {
		return name.Digest{}, fmt.Errorf("push %s: %w (credentials come from the docker config: docker login or $DOCKER_CONFIG)", ref, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return name.Digest{}, err
	}
	return ref.Context().Digest(digest.String()), nil
}
