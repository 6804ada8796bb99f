package source

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-git/go-git/v5"
	gitconfig "github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/go-git/go-git/v5/storage/memory"
)

// GitAuth holds the credentials of a git remote, read from the Decofile's spec.git.secretRef.
type GitAuth struct {
	// Username and Password authenticate over HTTPS (Password may be an access token).
	Username, Password string
	// BearerToken authenticates over HTTPS with "Authorization: Bearer".
	BearerToken string
	// Identity is a PEM private key for SSH remotes; KnownHosts (required with it) pins the host keys.
	Identity, KnownHosts []byte
}

// Git fetches Decofile content from any git remote with go-git: refs are listed to resolve a
// branch or tag to a commit, and only that one commit is fetched (depth 1) into a temporary
// bare repository that is removed afterwards.
type Git struct {
	// Limits bound the content read from the commit.
	Limits Limits
	// TempDir holds the temporary repositories; "" means the OS default.
	TempDir string
}

func (a *GitAuth) method(tmp string) (transport.AuthMethod, error) {
	if a == nil {
		return nil, nil
	}
	switch {
	case len(a.Identity) > 0:
		if len(a.KnownHosts) == 0 {
			return nil, errorf(ReasonCredentials, false, "the git Secret has an SSH identity but no known_hosts; add known_hosts so the remote's host key can be verified")
		}
		user := a.Username
		if user == "" {
			user = "git"
		}
		keys, err := gitssh.NewPublicKeys(user, a.Identity, a.Password)
		if err != nil {
			return nil, errorf(ReasonCredentials, false, "read the SSH identity of the git Secret: %w", err)
		}
		kh := filepath.Join(tmp, "known_hosts")
		if err := os.WriteFile(kh, a.KnownHosts, 0o600); err != nil {
			return nil, errorf(ReasonUnavailable, true, "write known_hosts: %w", err)
		}
		cb, err := gitssh.NewKnownHostsCallback(kh)
		if err != nil {
			return nil, errorf(ReasonCredentials, false, "parse known_hosts of the git Secret: %w", err)
		}
		keys.HostKeyCallback = cb
		return keys, nil
	case a.BearerToken != "":
		return &githttp.TokenAuth{Token: a.BearerToken}, nil
	case a.Username != "" || a.Password != "":
		return &githttp.BasicAuth{Username: a.Username, Password: a.Password}, nil
	}
	return nil, nil
}

// Resolve returns the commit SHA that ref (a branch, tag, full ref name or commit SHA) names
// on the remote at url, listing the remote's refs without fetching objects.
func (g *Git) Resolve(ctx context.Context, url, ref string, auth *GitAuth) (string, error) {
	if IsCommitSHA(ref) {
		return strings.ToLower(ref), nil
	}
	tmp, err := os.MkdirTemp(g.TempDir, "decofile-git-")
	if err != nil {
		return "", errorf(ReasonUnavailable, true, "create temporary folder: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	am, err := auth.method(tmp)
	if err != nil {
		return "", err
	}
	refs, err := listRefs(ctx, url, am)
	if err != nil {
		return "", err
	}
	_, sha, ok := findRef(refs, ref)
	if !ok {
		return "", errorf(ReasonNotFound, false, "%s has no branch or tag %q", url, ref)
	}
	return sha, nil
}

func listRefs(ctx context.Context, url string, am transport.AuthMethod) ([]*plumbing.Reference, error) {
	remote := git.NewRemote(memory.NewStorage(), &gitconfig.RemoteConfig{Name: "origin", URLs: []string{url}})
	refs, err := remote.ListContext(ctx, &git.ListOptions{Auth: am, PeelingOption: git.AppendPeeled})
	if err != nil {
		return nil, gitError(url, err)
	}
	return refs, nil
}

// findRef looks ref up as a full name, a branch, then a tag (peeled to its commit).
func findRef(refs []*plumbing.Reference, ref string) (full plumbing.ReferenceName, sha string, ok bool) {
	byName := map[plumbing.ReferenceName]plumbing.Hash{}
	for _, r := range refs {
		if r.Type() == plumbing.HashReference {
			byName[r.Name()] = r.Hash()
		}
	}
	for _, n := range []plumbing.ReferenceName{plumbing.ReferenceName(ref), plumbing.NewBranchReferenceName(ref), plumbing.NewTagReferenceName(ref)} {
		h, found := byName[n]
		if !found {
			continue
		}
		if peeled, isTag := byName[n+"^{}"]; isTag {
			h = peeled
		}
		return n, h.String(), true
	}
	return "", "", false
}

func gitError(url string, err error) error {
	switch {
	case errors.Is(err, transport.ErrRepositoryNotFound), errors.Is(err, transport.ErrEmptyRemoteRepository):
		return errorf(ReasonNotFound, false, "git remote %s: %w; check spec.git.url", url, err)
	case errors.Is(err, transport.ErrAuthenticationRequired):
		return errorf(ReasonUnauthorized, false, "git remote %s: %w; set spec.git.secretRef to a Secret with username/password, bearerToken or identity", url, err)
	case errors.Is(err, transport.ErrAuthorizationFailed):
		return errorf(ReasonUnauthorized, false, "git remote %s: %w; check the credentials in spec.git.secretRef", url, err)
	}
	return errorf(ReasonUnavailable, true, "git remote %s: %w", url, err)
}

// Fetch fetches the one commit sha (which ref resolved to) and extracts the block files under
// folder from its tree. Branches and tags are fetched shallow by name; a bare commit SHA is
// fetched directly, or from the full history when the remote does not serve unadvertised SHAs.
func (g *Git) Fetch(ctx context.Context, url, ref, sha, folder string, auth *GitAuth) (Blocks, error) {
	tmp, err := os.MkdirTemp(g.TempDir, "decofile-git-")
	if err != nil {
		return nil, errorf(ReasonUnavailable, true, "create temporary folder: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	am, err := auth.method(tmp)
	if err != nil {
		return nil, err
	}
	repo, err := git.PlainInit(filepath.Join(tmp, "repo.git"), true)
	if err != nil {
		return nil, errorf(ReasonUnavailable, true, "create temporary repository: %w", err)
	}
	if _, err := repo.CreateRemote(&gitconfig.RemoteConfig{Name: "origin", URLs: []string{url}}); err != nil {
		return nil, errorf(ReasonUnavailable, true, "configure remote: %w", err)
	}
	var specs []gitconfig.RefSpec
	if IsCommitSHA(ref) {
		specs = []gitconfig.RefSpec{gitconfig.RefSpec(sha + ":refs/heads/pinned")}
	} else {
		refs, err := listRefs(ctx, url, am)
		if err != nil {
			return nil, err
		}
		full, _, ok := findRef(refs, ref)
		if !ok {
			return nil, errorf(ReasonNotFound, false, "%s has no branch or tag %q", url, ref)
		}
		specs = []gitconfig.RefSpec{gitconfig.RefSpec("+" + full + ":" + full)}
	}
	err = repo.FetchContext(ctx, &git.FetchOptions{RemoteName: "origin", RefSpecs: specs, Depth: 1, Auth: am, Tags: git.NoTags})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		if !IsCommitSHA(ref) {
			return nil, gitError(url, err)
		}
		// Most servers only serve advertised tips; fall back to fetching every branch.
		err = repo.FetchContext(ctx, &git.FetchOptions{RemoteName: "origin", RefSpecs: []gitconfig.RefSpec{"+refs/heads/*:refs/remotes/origin/*"}, Auth: am, Tags: git.AllTags})
		if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
			return nil, gitError(url, err)
		}
	}
	commit, err := repo.CommitObject(plumbing.NewHash(sha))
	if err != nil {
		if IsCommitSHA(ref) {
			return nil, errorf(ReasonNotFound, false, "%s has no commit %s", url, sha)
		}
		// The branch moved between resolving and fetching: read what was fetched.
		refs, lerr := repo.References()
		if lerr != nil {
			return nil, errorf(ReasonUnavailable, true, "read fetched refs: %w", lerr)
		}
		_ = refs.ForEach(func(r *plumbing.Reference) error {
			if commit == nil && r.Type() == plumbing.HashReference {
				commit, _ = repo.CommitObject(r.Hash())
			}
			return nil
		})
		if commit == nil {
			return nil, errorf(ReasonUnavailable, true, "commit %s of %s was not fetched: %w", sha, url, err)
		}
	}
	return extractCommit(commit, folder, g.Limits)
}

// extractCommit reads the block files under folder from the tree of commit.
func extractCommit(commit *object.Commit, folder string, l Limits) (Blocks, error) {
	c := newCollector(folder, l)
	tree, err := commit.Tree()
	if err != nil {
		return nil, errorf(ReasonInvalidArchive, false, "read tree of %s: %w", commit.Hash, err)
	}
	if c.prefix != "" {
		sub, err := tree.Tree(c.prefix)
		if errors.Is(err, object.ErrDirectoryNotFound) || errors.Is(err, object.ErrEntryNotFound) {
			return c.result()
		}
		if err != nil {
			return nil, errorf(ReasonInvalidArchive, false, "read folder %s of %s: %w", c.prefix, commit.Hash, err)
		}
		tree = sub
	}
	var files []*object.File
	err = tree.Files().ForEach(func(f *object.File) error {
		files = append(files, f)
		return nil
	})
	if err != nil {
		return nil, errorf(ReasonInvalidArchive, false, "list files of %s: %w", commit.Hash, err)
	}
	for _, f := range files {
		if f.Mode != filemode.Regular && f.Mode != filemode.Executable {
			continue
		}
		p := f.Name
		if c.prefix != "" {
			p = c.prefix + "/" + f.Name
		}
		if !c.match(p) {
			continue
		}
		if err := c.add(p, f.Size, func() (io.ReadCloser, error) { return f.Reader() }); err != nil {
			return nil, err
		}
	}
	return c.result()
}
