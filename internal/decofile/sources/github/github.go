// Package github is the github source kind: a folder of a GitHub repository at a branch, tag or
// commit, downloaded as the commit's archive.
package github

import (
	"context"
	"fmt"
	"strings"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/push"
	"github.com/siteops/siteops/internal/decofile/source"
	"github.com/siteops/siteops/internal/decofile/sources/kind"
)

// Kind is the github source kind.
type Kind struct{ env kind.Env }

// New returns the github kind, fetching through env.GitHub with a token env.Tokens allows.
func New(env kind.Env) kind.Kind { return &Kind{env: env} }

// Type is github.
func (*Kind) Type() decov1.SourceType { return decov1.SourceGitHub }

// Remote is true.
func (*Kind) Remote() bool { return true }

// Resolve finds the commit of spec.github.commit with the token the Decofile may use.
func (k *Kind) Resolve(ctx context.Context, df *decov1.Decofile) (kind.Resolution, error) {
	gh := df.Spec.GitHub
	if gh == nil {
		return kind.Resolution{}, kind.Invalid("spec.source is github but spec.github is not set")
	}
	own, err := kind.SecretValue(ctx, k.env.Reader, df.Namespace, gh.Secret, "token", "spec.github.secret")
	if err != nil {
		return kind.Resolution{}, err
	}
	token, _, err := k.env.Tokens.Choose(ctx, df.Namespace, gh.Org, gh.Repo, own)
	if err != nil {
		return kind.Resolution{}, err
	}
	sha, err := k.env.GitHub.Resolve(ctx, gh.Org, gh.Repo, gh.Commit, token)
	if err != nil {
		return kind.Resolution{}, err
	}
	return kind.Resolution{Revision: sha, Download: func(ctx context.Context) (source.Blocks, error) {
		return k.env.GitHub.Fetch(ctx, gh.Org, gh.Repo, sha, gh.Path, token)
	}}, nil
}

// Keys is the repository and branch or tag followed; none for a commit SHA.
func (*Kind) Keys(df *decov1.Decofile) []string {
	gh := df.Spec.GitHub
	if gh == nil || push.ShortRef(gh.Commit) == "" || !moves(gh.Commit) {
		return nil
	}
	return []string{push.GitHubKey(gh.Org, gh.Repo, gh.Commit)}
}

// Moves is true for a branch or tag.
func (*Kind) Moves(df *decov1.Decofile) bool {
	return df.Spec.GitHub != nil && moves(df.Spec.GitHub.Commit)
}

func moves(ref string) bool { return !source.IsCommitSHA(push.ShortRef(ref)) }

// Describe names the repository, reference and folder.
func (*Kind) Describe(df *decov1.Decofile) string {
	g := df.Spec.GitHub
	if g == nil {
		return string(decov1.SourceGitHub)
	}
	return strings.TrimSpace(fmt.Sprintf("github %s/%s at %s %s", g.Org, g.Repo, g.Commit, g.Path))
}
