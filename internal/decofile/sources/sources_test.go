package sources

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
	"github.com/siteops/siteops/internal/decofile/source"
)

const sha = "0123456789abcdef0123456789abcdef01234567"

func TestKeysAndMoves(t *testing.T) {
	cases := []struct {
		name  string
		spec  decov1.DecofileSpec
		keys  []string
		moves bool
	}{
		{"github branch", decov1.DecofileSpec{Source: decov1.SourceGitHub, GitHub: &decov1.GitHubSource{Org: "Acme", Repo: "Shop", Commit: "main"}},
			[]string{"github/acme/shop#main"}, true},
		{"github full ref", decov1.DecofileSpec{Source: decov1.SourceGitHub, GitHub: &decov1.GitHubSource{Org: "acme", Repo: "shop", Commit: "refs/tags/v1"}},
			[]string{"github/acme/shop#v1"}, true},
		{"github pinned", decov1.DecofileSpec{Source: decov1.SourceGitHub, GitHub: &decov1.GitHubSource{Org: "acme", Repo: "shop", Commit: sha}},
			nil, false},
		{"git default ref", decov1.DecofileSpec{Source: decov1.SourceGit, Git: &decov1.GitSource{URL: "https://Git.example/Acme/Shop.git"}},
			[]string{"git/git.example/acme/shop#main"}, true},
		{"git pinned", decov1.DecofileSpec{Source: decov1.SourceGit, Git: &decov1.GitSource{URL: "https://git.example/acme/shop", Ref: sha}},
			nil, false},
		{"git local path", decov1.DecofileSpec{Source: decov1.SourceGit, Git: &decov1.GitSource{URL: "/srv/shop.git", Ref: "main"}},
			nil, true},
		{"inline", decov1.DecofileSpec{Source: decov1.SourceInline, Inline: &decov1.InlineSource{}}, nil, false},
		{"block missing", decov1.DecofileSpec{Source: decov1.SourceGit}, nil, false},
		{"unknown kind", decov1.DecofileSpec{Source: "svn"}, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			df := &decov1.Decofile{Spec: c.spec}
			if got := Describing.Keys(df); !slices.Equal(got, c.keys) {
				t.Errorf("Keys = %q, want %q", got, c.keys)
			}
			if got := Describing.Moves(df); got != c.moves {
				t.Errorf("Moves = %v, want %v", got, c.moves)
			}
		})
	}
}

func TestInlineResolvesToItsBlocks(t *testing.T) {
	df := &decov1.Decofile{Spec: decov1.DecofileSpec{Source: decov1.SourceInline, Inline: &decov1.InlineSource{
		Value: map[string]apiextensionsv1.JSON{"home": {Raw: json.RawMessage(`{"title":"Home"}`)}}}}}
	k, err := Describing.For(df)
	if err != nil {
		t.Fatal(err)
	}
	if k.Remote() {
		t.Error("inline content takes a retrieval slot")
	}
	res, err := k.Resolve(context.Background(), df)
	if err != nil || res.Revision != "" {
		t.Fatalf("Resolve = %q, %v; want no revision", res.Revision, err)
	}
	blocks, err := res.Download(context.Background())
	if err != nil || string(blocks["home"]) != `{"title":"Home"}` {
		t.Fatalf("Download = %v, %v", blocks, err)
	}
	if got := Describing.Describe(df); got != "inline, 1 blocks" {
		t.Errorf("Describe = %q", got)
	}
}

func TestMissingBlockAndUnknownKindAreInvalidContent(t *testing.T) {
	for _, df := range []*decov1.Decofile{
		{Spec: decov1.DecofileSpec{Source: decov1.SourceInline}},
		{Spec: decov1.DecofileSpec{Source: decov1.SourceGitHub}},
		{Spec: decov1.DecofileSpec{Source: decov1.SourceGit}},
		{Spec: decov1.DecofileSpec{Source: "svn"}},
	} {
		err := resolve(df)
		var e *source.Error
		if !errors.As(err, &e) || e.Reason != source.ReasonInvalidContent {
			t.Errorf("source %q: error %v, want reason %s", df.Spec.Source, err, source.ReasonInvalidContent)
		}
	}
}

func resolve(df *decov1.Decofile) error {
	k, err := Describing.For(df)
	if err != nil {
		return err
	}
	_, err = k.Resolve(context.Background(), df)
	return err
}
