// Package git is the git source kind: a folder of any git remote (HTTPS or SSH) at a branch, tag
// or commit.
package git

import (
	"context"
	"fmt"
	"strings"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/push"
	"github.com/siteops/siteops/internal/decofile/source"
	"github.com/siteops/siteops/internal/decofile/sources/kind"
)

// DefaultRef is the reference followed when spec.git.ref is empty.
const DefaultRef = "main"

// Kind is the git source kind.
type Kind struct{ env kind.Env }

// New returns the git kind, fetching through env.Git.
func New(env kind.Env) kind.Kind { return &Kind{env: env} }

// Type is git.
func (*Kind) Type() decov1.SourceType { return decov1.SourceGit }

// Remote is true.
func (*Kind) Remote() bool { return true }

// Resolve finds the commit of spec.git.ref with the credentials of spec.git.secretRef.
func (k *Kind) Resolve(ctx context.Context, df *decov1.Decofile) (kind.Resolution, error) {
	g := df.Spec.Git
	if g == nil {
		return kind.Resolution{}, kind.Invalid("spec.source is git but spec.git is not set")
	}
	auth, err := k.auth(ctx, df.Namespace, g)
	if err != nil {
		return kind.Resolution{}, err
	}
	ref := refOf(g)
	sha, err := k.env.Git.Resolve(ctx, g.URL, ref, auth)
	if err != nil {
		return kind.Resolution{}, err
	}
	return kind.Resolution{Revision: sha, Download: func(ctx context.Context) (source.Blocks, error) {
		return k.env.Git.Fetch(ctx, g.URL, ref, sha, g.Path, auth)
	}}, nil
}

func (k *Kind) auth(ctx context.Context, ns string, g *decov1.GitSource) (*source.GitAuth, error) {
	if g.SecretRef == nil || g.SecretRef.Name == "" {
		return nil, nil
	}
	s, err := kind.Secret(ctx, k.env.Reader, ns, g.SecretRef.Name, "spec.git.secretRef")
	if err != nil {
		return nil, err
	}
	a := &source.GitAuth{
		Username:    string(s.Data["username"]),
		Password:    string(s.Data["password"]),
		BearerToken: string(s.Data["bearerToken"]),
		Identity:    s.Data["identity"],
		KnownHosts:  s.Data["known_hosts"],
	}
	if a.Username == "" && a.Password == "" && a.BearerToken == "" && len(a.Identity) == 0 {
		return nil, &source.Error{Reason: source.ReasonCredentials, Err: fmt.Errorf("secret %s named by spec.git.secretRef has none of username/password, bearerToken or identity", g.SecretRef.Name)}
	}
	return a, nil
}

func refOf(g *decov1.GitSource) string {
	if g.Ref == "" {
		return DefaultRef
	}
	return g.Ref
}

// Keys is the repository and branch or tag followed; none for a commit SHA or a URL that names
// no remote repository.
func (k *Kind) Keys(df *decov1.Decofile) []string {
	if !k.Moves(df) {
		return nil
	}
	if id, ok := push.RepoIdentity(df.Spec.Git.URL); ok {
		return []string{push.GitKey(id, refOf(df.Spec.Git))}
	}
	return nil
}

// Moves is true for a branch or tag.
func (*Kind) Moves(df *decov1.Decofile) bool {
	return df.Spec.Git != nil && !source.IsCommitSHA(push.ShortRef(refOf(df.Spec.Git)))
}

// Describe names the remote, reference and folder.
func (*Kind) Describe(df *decov1.Decofile) string {
	g := df.Spec.Git
	if g == nil {
		return string(decov1.SourceGit)
	}
	return strings.TrimSpace(fmt.Sprintf("git %s ref %s %s", g.URL, g.Ref, g.Path))
}
