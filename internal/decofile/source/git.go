package source

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	gitsideband "github.com/go-git/go-git/v5/plumbing/protocol/packp/sideband"
	"github.com/go-git/go-git/v5/plumbing/transport"
	gitfile "github.com/go-git/go-git/v5/plumbing/transport/file"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"github.com/siteops/siteops/internal/egress"
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

// Git fetches Decofile content from any git remote with go-git: the remote's refs are listed to
// resolve a branch or tag to a commit, and only that one commit is fetched (depth 1) into a
// temporary bare repository that is removed afterwards. Every connection goes through the URL
// policy, every operation ends within Timeout, and the bytes received are bounded by
// Limits.ArchiveBytes.
type Git struct {
	// Limits bound the content read from the commit; ArchiveBytes bounds the bytes received.
	Limits Limits
	// TempDir holds the temporary repositories; "" means the OS default.
	TempDir string
	// Egress decides which URLs and destinations may be reached; nil means https and ssh to
	// public addresses only.
	Egress *egress.Policy
	// Timeout bounds each Resolve and each Fetch; 0 means DefaultTimeout.
	Timeout time.Duration
	// Gate bounds the retrievals in flight per remote host (scheme, host and port): a host that
	// hangs holds at most Gate.PerRemote workers. nil means a Gate of its own with the defaults.
	Gate *Gate

	once sync.Once
	http transport.Transport

	ownGate Gate   // used when Gate is nil
	share   shared // commits fetched recently, for the other Decofiles following them
}

// gate is the Gate in use.
func (g *Git) gate() *Gate { return orOwn(g.Gate, &g.ownGate) }

// acquire takes a slot of rawURL's host in the Gate.
func (g *Git) acquire(ctx context.Context, rawURL string) (func(), error) {
	return g.gate().acquire(ctx, "git", gitRemoteKey(rawURL), "git remote "+egress.Redact(rawURL))
}

// gitRemoteKey names the host of a git URL for the Gate: scheme, host and port; a URL that does
// not parse is its own key (the session refuses it).
func gitRemoteKey(rawURL string) string {
	ep, err := transport.NewEndpoint(rawURL)
	if err != nil {
		return rawURL
	}
	return fmt.Sprintf("%s://%s:%d", ep.Protocol, strings.ToLower(ep.Host), ep.Port)
}

// credential is the whole of the credentials, for the key of shared content.
func (a *GitAuth) credential() string {
	if a == nil {
		return ""
	}
	return strings.Join([]string{a.Username, a.Password, a.BearerToken, string(a.Identity), string(a.KnownHosts)}, "\x00")
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
	ctx, o, cancel := begin(ctx, g.Timeout, g.Limits.WithDefaults().ArchiveBytes)
	defer cancel()
	release, err := g.acquire(ctx, url)
	if err != nil {
		return "", err
	}
	defer release()
	tmp, err := os.MkdirTemp(g.TempDir, "decofile-git-")
	if err != nil {
		return "", errorf(ReasonUnavailable, true, "create temporary folder: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	sess, release, err := g.session(ctx, o, url, auth, tmp)
	if err != nil {
		return "", err
	}
	defer release()
	ar, err := sess.AdvertisedReferencesContext(ctx)
	if err != nil {
		return "", g.fail(ctx, o, url, err)
	}
	_, sha, ok := findRef(advertised(ar), ref)
	if !ok {
		return "", errorf(ReasonNotFound, false, "%s has no branch or tag %q", egress.Redact(url), ref)
	}
	return sha, nil
}

// Fetch fetches the one commit sha (which ref resolved to) and extracts the block files under
// folder from its tree. Only that commit is asked for: a commit SHA the remote does not serve
// (not reachable from its branches and tags, or a remote that serves tips only) fails with
// NotFound rather than downloading every branch to look for it. The Decofiles following the
// same commit and folder with the same credentials share one download (see shared).
func (g *Git) Fetch(ctx context.Context, url, ref, sha, folder string, auth *GitAuth) (Blocks, error) {
	key := sharedKey(url, sha, folder, auth.credential())
	if b, ok := g.share.get("git", key); ok {
		return b, nil
	}
	ctx, o, cancel := begin(ctx, g.Timeout, g.Limits.WithDefaults().ArchiveBytes)
	defer cancel()
	release, err := g.acquire(ctx, url)
	if err != nil {
		return nil, err
	}
	defer release()
	return g.share.fetch("git", key, func() (Blocks, error) { return g.fetch(ctx, o, url, ref, sha, folder, auth) })
}

func (g *Git) fetch(ctx context.Context, o *op, url, ref, sha, folder string, auth *GitAuth) (Blocks, error) {
	tmp, err := os.MkdirTemp(g.TempDir, "decofile-git-")
	if err != nil {
		return nil, errorf(ReasonUnavailable, true, "create temporary folder: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	// Pack files stay open while the commit is read: the walk looks up objects one folder at a
	// time, and each lookup would otherwise open the pack again.
	st := filesystem.NewStorageWithOptions(osfs.New(filepath.Join(tmp, "repo.git")), cache.NewObjectLRUDefault(), filesystem.Options{KeepDescriptors: true})
	defer func() { _ = st.Close() }()
	repo, err := git.Init(st, nil)
	if err != nil {
		return nil, errorf(ReasonUnavailable, true, "create temporary repository: %w", err)
	}
	sess, release, err := g.session(ctx, o, url, auth, tmp)
	if err != nil {
		return nil, err
	}
	defer release()
	ar, err := sess.AdvertisedReferencesContext(ctx)
	if err != nil {
		return nil, g.fail(ctx, o, url, err)
	}
	if !IsCommitSHA(ref) {
		_, tip, ok := findRef(advertised(ar), ref)
		if !ok {
			return nil, errorf(ReasonNotFound, false, "%s has no branch or tag %q", egress.Redact(url), ref)
		}
		if tip != sha {
			return nil, errorf(ReasonUnavailable, true, "%s: %q moved from %s to %s while fetching; retrying", egress.Redact(url), ref, short(sha), short(tip))
		}
	}
	want := plumbing.NewHash(sha)
	req := packp.NewUploadPackRequestFromCapabilities(ar.Capabilities)
	req.Wants = []plumbing.Hash{want}
	req.Depth = packp.DepthCommits(1)
	if err := req.Capabilities.Set(capability.Shallow); err != nil {
		return nil, errorf(ReasonUnavailable, true, "%s: request a shallow fetch: %w", egress.Redact(url), err)
	}
	if ar.Capabilities.Supports(capability.NoProgress) {
		_ = req.Capabilities.Set(capability.NoProgress)
	}
	resp, err := sess.UploadPack(ctx, req)
	if err == nil {
		err = packfile.UpdateObjectStorage(repo.Storer, sideband(req.Capabilities, resp))
		_ = resp.Close()
	}
	if err != nil {
		if e := o.classify(ctx, "git remote "+egress.Redact(url), err); e != nil {
			return nil, e
		}
		if IsCommitSHA(ref) {
			return nil, errorf(ReasonNotFound, false, "%s does not serve commit %s: it does not exist, or it is not reachable from a branch or tag the remote lets clients fetch; pin a commit of a pushed branch, a branch or a tag", egress.Redact(url), sha)
		}
		return nil, g.fail(ctx, o, url, err)
	}
	commit, err := repo.CommitObject(want)
	if err != nil {
		return nil, errorf(ReasonNotFound, false, "%s did not send commit %s", egress.Redact(url), sha)
	}
	blocks, err := extractCommit(ctx, repo.Storer, commit.Hash, commit.TreeHash, folder, g.Limits)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// The walk of a commit's folders is part of the retrieval and ends with its deadline.
		return nil, errorf(ReasonUnavailable, true, "git remote %s: the folders of commit %s were not read within %s (%s); retrying", egress.Redact(url), short(sha), o.timeout, flagTimeout)
	}
	return blocks, err
}

func (g *Git) policy() *egress.Policy {
	if g.Egress == nil {
		return defaultEgress
	}
	return g.Egress
}

// session opens an upload-pack session to rawURL through the URL policy; release closes it.
func (g *Git) session(ctx context.Context, o *op, rawURL string, auth *GitAuth, tmp string) (transport.UploadPackSession, func(), error) {
	ep, err := transport.NewEndpoint(rawURL)
	if err != nil {
		return nil, nil, errorf(ReasonInvalidContent, false, "spec.git.url is not a git URL; use https://host/org/repo.git or ssh://git@host/org/repo.git")
	}
	if err := g.policy().CheckScheme(ep.Protocol); err != nil {
		return nil, nil, errorf(ReasonNotAllowed, false, "git remote %s: %w", egress.Redact(rawURL), err)
	}
	am, err := auth.method(tmp)
	if err != nil {
		return nil, nil, err
	}
	release := func() {}
	var tr transport.Transport
	switch ep.Protocol {
	case "http", "https":
		g.once.Do(func() {
			g.http = githttp.NewClient(&http.Client{Transport: newTransport(g.Egress)})
		})
		tr = g.http
	case "ssh":
		if _, ok := am.(*gitssh.PublicKeys); !ok {
			// Without a key of its own go-git would use the operator's SSH agent and known_hosts.
			return nil, nil, errorf(ReasonCredentials, false, "git remote %s is an SSH URL: set spec.git.secretRef to a Secret with identity and known_hosts", egress.Redact(rawURL))
		}
		proxyURL, done := sshRoute(ctx, g.Egress, o)
		ep.Proxy = transport.ProxyOptions{URL: proxyURL}
		tr, release = gitssh.DefaultClient, done
	case "file":
		tr = gitfile.DefaultClient
	default:
		return nil, nil, errorf(ReasonNotAllowed, false, "git remote %s: URL scheme %q is not supported; use https or ssh", egress.Redact(rawURL), ep.Protocol)
	}
	sess, err := tr.NewUploadPackSession(ep, am)
	if err != nil {
		release()
		return nil, nil, g.fail(ctx, o, rawURL, err)
	}
	return sess, func() { _ = sess.Close(); release() }, nil
}

// advertised lists the refs of an advertisement, peeled tags as "<name>^{}".
func advertised(ar *packp.AdvRefs) []*plumbing.Reference {
	var out []*plumbing.Reference
	if all, err := ar.AllReferences(); err == nil {
		for _, r := range all {
			out = append(out, r)
		}
	}
	for name, h := range ar.Peeled {
		out = append(out, plumbing.NewReferenceFromStrings(name+"^{}", h.String()))
	}
	return out
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

// fail describes a failed git operation without anything the remote wrote: the operation's own
// bounds and the URL policy first, then the kind of failure and what to check.
func (g *Git) fail(ctx context.Context, o *op, rawURL string, err error) error {
	target := "git remote " + egress.Redact(rawURL)
	if e := o.classify(ctx, target, err); e != nil {
		return e
	}
	code := int(o.status.Load())
	switch {
	case errors.Is(err, transport.ErrRepositoryNotFound):
		return errorf(ReasonNotFound, false, "%s: repository not found%s; check spec.git.url and, for a private repository, spec.git.secretRef", target, httpStatus(code))
	case errors.Is(err, transport.ErrEmptyRemoteRepository):
		return errorf(ReasonNotFound, false, "%s: the repository is empty; push a commit or check spec.git.url", target)
	case errors.Is(err, transport.ErrAuthenticationRequired):
		return errorf(ReasonUnauthorized, false, "%s: authentication required%s; set spec.git.secretRef to a Secret with username/password, bearerToken or identity", target, httpStatus(code))
	case errors.Is(err, transport.ErrAuthorizationFailed):
		return errorf(ReasonUnauthorized, false, "%s: access denied%s; check the credentials in spec.git.secretRef", target, httpStatus(code))
	case code != 0:
		return errorf(ReasonUnavailable, true, "%s: answered HTTP %d; check spec.git.url (retrying)", target, code)
	case strings.Contains(err.Error(), "ssh: handshake failed"):
		// The text is the SSH client's own; only the fact is reported.
		return errorf(ReasonUnauthorized, false, "%s: SSH handshake failed: the host key is not in known_hosts or the identity was refused; check known_hosts and identity in spec.git.secretRef", target)
	}
	return errorf(ReasonUnavailable, true, "%s: %s; check spec.git.url (retrying)", target, egress.NetDetail(err))
}

func httpStatus(code int) string {
	if code == 0 {
		return ""
	}
	return fmt.Sprintf(" (HTTP %d)", code)
}

// sideband demultiplexes the pack stream when the request asked for side bands; progress and
// messages of the remote are dropped.
func sideband(l *capability.List, r io.Reader) io.Reader {
	switch {
	case l.Supports(capability.Sideband64k):
		return gitsideband.NewDemuxer(gitsideband.Sideband64k, r)
	case l.Supports(capability.Sideband):
		return gitsideband.NewDemuxer(gitsideband.Sideband, r)
	}
	return r
}

func short(sha string) string {
	if len(sha) > 7 {
		return sha[:7]
	}
	return sha
}
