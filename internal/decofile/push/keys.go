package push

import (
	"net/url"
	"strings"
)

// Keys name a repository and branch (or tag) the same way on both sides: each source kind
// says which one a Decofile follows, and a push event names the ones it changed. A key is
// "github/<org>/<repo>#<ref>" for the github source and "git/<host[:port]>/<path>#<ref>" for a
// git URL; host and path are lower-case (hosted git servers match them without case), the ref
// is the branch or tag name as git writes it.

// GitHubKey is the key of branch or tag ref of the GitHub repository org/repo.
func GitHubKey(org, repo, ref string) string {
	return "github/" + strings.ToLower(org) + "/" + strings.ToLower(repo) + "#" + ShortRef(ref)
}

// GitKey is the key of branch or tag ref of the repository whose RepoIdentity is id.
func GitKey(id, ref string) string { return "git/" + id + "#" + ShortRef(ref) }

// ShortRef turns refs/heads/<b> and refs/tags/<t> into the branch or tag name.
func ShortRef(ref string) string {
	ref = strings.TrimSpace(ref)
	for _, p := range []string{"refs/heads/", "refs/tags/"} {
		if strings.HasPrefix(ref, p) {
			return strings.TrimPrefix(ref, p)
		}
	}
	return ref
}

// defaultPorts are left out of an identity, so https://host/x and https://host:443/x match.
var defaultPorts = map[string]string{"http": "80", "https": "443", "ssh": "22", "git": "9418"}

// RepoIdentity is the host (with a port other than the scheme's default) and path of a git
// URL, lower-case, without credentials, scheme, trailing slash or ".git":
// https://user@Git.example/Acme/Shop.git and git@git.example:acme/shop both give
// "git.example/acme/shop". ok is false for what is not a remote URL.
func RepoIdentity(raw string) (id string, ok bool) {
	raw = strings.TrimSpace(raw)
	var host, port, path string
	if !strings.Contains(raw, "://") {
		// scp-like syntax: [user@]host:path
		at := strings.LastIndex(raw, "@")
		rest := raw[at+1:]
		h, p, found := strings.Cut(rest, ":")
		if !found || h == "" || strings.Contains(h, "/") {
			return "", false
		}
		host, path = h, p
	} else {
		u, err := url.Parse(raw)
		if err != nil || u.Hostname() == "" || u.Scheme == "file" {
			return "", false
		}
		host, port, path = u.Hostname(), u.Port(), u.Path
		if port == defaultPorts[strings.ToLower(u.Scheme)] {
			port = ""
		}
	}
	path = strings.TrimSuffix(strings.Trim(path, "/"), ".git")
	path = strings.TrimSuffix(path, "/")
	if path == "" {
		return "", false
	}
	host = strings.ToLower(host)
	if port != "" {
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
		host += ":" + port
	}
	return host + "/" + strings.ToLower(path), true
}
