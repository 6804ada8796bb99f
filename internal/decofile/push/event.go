package push

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Providers, as they appear in metrics and logs.
const (
	ProviderGitHub = "github"
	ProviderGitea  = "gitea" // Gitea and Forgejo
	ProviderGitLab = "gitlab"
)

// Event kinds.
const (
	KindPush  = "push"
	KindPing  = "ping"
	KindOther = "other"
)

// delivery is one request as the sender described it in its headers.
type delivery struct {
	provider string
	event    string // the event header's value
	id       string // the sender's delivery ID, "" when it sends none
	// verify checks the body against the request's signature or token.
	verify func(body, secret []byte) error
}

var (
	errNoSignature  = errors.New("no signature header")
	errBadSignature = errors.New("signature does not match the body")
)

// identify tells the sender apart by its headers. Gitea and Forgejo also send X-GitHub-Event
// for compatibility, so they are looked for first.
func identify(h http.Header) (delivery, bool) {
	switch {
	case h.Get("X-Forgejo-Event") != "" || h.Get("X-Gitea-Event") != "":
		d := delivery{provider: ProviderGitea, event: first(h, "X-Forgejo-Event", "X-Gitea-Event"), id: first(h, "X-Forgejo-Delivery", "X-Gitea-Delivery")}
		sig := first(h, "X-Forgejo-Signature", "X-Gitea-Signature")
		d.verify = func(body, secret []byte) error { return verifyHex(sig, body, secret) }
		return d, true
	case h.Get("X-GitHub-Event") != "":
		sig := h.Get("X-Hub-Signature-256")
		d := delivery{provider: ProviderGitHub, event: h.Get("X-GitHub-Event"), id: h.Get("X-GitHub-Delivery")}
		d.verify = func(body, secret []byte) error {
			if sig == "" {
				return errNoSignature
			}
			hexSig, ok := strings.CutPrefix(sig, "sha256=")
			if !ok {
				return errBadSignature
			}
			return verifyHex(hexSig, body, secret)
		}
		return d, true
	case h.Get("X-Gitlab-Event") != "":
		token := h.Get("X-Gitlab-Token")
		d := delivery{provider: ProviderGitLab, event: h.Get("X-Gitlab-Event"), id: first(h, "X-Gitlab-Event-UUID", "Idempotency-Key")}
		// GitLab sends the secret itself, not a signature of the body.
		d.verify = func(_, secret []byte) error {
			if token == "" {
				return errNoSignature
			}
			if subtle.ConstantTimeCompare([]byte(token), secret) != 1 {
				return errBadSignature
			}
			return nil
		}
		return d, true
	}
	return delivery{}, false
}

func first(h http.Header, names ...string) string {
	for _, n := range names {
		if v := h.Get(n); v != "" {
			return v
		}
	}
	return ""
}

// verifyHex checks a hex HMAC-SHA256 of body with secret, in constant time.
func verifyHex(sig string, body, secret []byte) error {
	if sig == "" {
		return errNoSignature
	}
	got, err := hex.DecodeString(strings.TrimSpace(sig))
	if err != nil {
		return errBadSignature
	}
	if !hmac.Equal(got, Sign(body, secret)) {
		return errBadSignature
	}
	return nil
}

// Sign is the HMAC-SHA256 of body with secret, as GitHub, Gitea and Forgejo sign deliveries.
func Sign(body, secret []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return m.Sum(nil)
}

// kind maps the provider's event name to push, ping or other.
func (d delivery) kind() string {
	switch d.provider {
	case ProviderGitLab:
		if d.event == "Push Hook" || d.event == "Tag Push Hook" {
			return KindPush
		}
		return KindOther
	default:
		switch d.event {
		case "push":
			return KindPush
		case "ping":
			return KindPing
		}
		return KindOther
	}
}

// payload holds the fields of a push event siteops reads; the rest is ignored.
type payload struct {
	Ref        string `json:"ref"`
	Repository struct {
		FullName string `json:"full_name"`
		CloneURL string `json:"clone_url"`
		SSHURL   string `json:"ssh_url"`
		HTMLURL  string `json:"html_url"`
		GitURL   string `json:"git_url"`
		// GitLab's repository object.
		URL        string `json:"url"`
		GitHTTPURL string `json:"git_http_url"`
		GitSSHURL  string `json:"git_ssh_url"`
		Homepage   string `json:"homepage"`
	} `json:"repository"`
	Project struct { // GitLab
		PathWithNamespace string `json:"path_with_namespace"`
		GitHTTPURL        string `json:"git_http_url"`
		GitSSHURL         string `json:"git_ssh_url"`
		WebURL            string `json:"web_url"`
	} `json:"project"`
}

// Push is what a push event says changed.
type Push struct {
	// Repository names the repository for logs (full name or path).
	Repository string
	// Ref is the pushed branch or tag name.
	Ref string
	// Keys are the index keys of that repository and ref (see GitHubKey and GitKey).
	Keys []string
}

// parsePush reads a push event's repository and ref. A GitHub push also names the github-source
// key; every URL the event gives for the repository names a git-source key.
func parsePush(provider string, body []byte) (Push, error) {
	var p payload
	if err := json.Unmarshal(body, &p); err != nil {
		return Push{}, fmt.Errorf("the body is not a JSON push event: %w", err)
	}
	ref := ShortRef(p.Ref)
	if ref == "" {
		return Push{}, errors.New("the push event names no ref")
	}
	out := Push{Ref: ref, Repository: p.Repository.FullName}
	if out.Repository == "" {
		out.Repository = p.Project.PathWithNamespace
	}
	if strings.HasPrefix(ref, "refs/") {
		// Neither a branch nor a tag (refs/pull/…, notes): no Decofile follows it.
		return out, nil
	}
	seen := map[string]bool{}
	add := func(k string) {
		if !seen[k] {
			seen[k] = true
			out.Keys = append(out.Keys, k)
		}
	}
	if provider == ProviderGitHub {
		if org, repo, ok := strings.Cut(p.Repository.FullName, "/"); ok && org != "" && repo != "" && !strings.Contains(repo, "/") {
			add(GitHubKey(org, repo, ref))
		}
	}
	r, pr := p.Repository, p.Project
	for _, u := range []string{r.CloneURL, r.SSHURL, r.HTMLURL, r.GitURL, r.URL, r.GitHTTPURL, r.GitSSHURL, r.Homepage, pr.GitHTTPURL, pr.GitSSHURL, pr.WebURL} {
		if u == "" {
			continue
		}
		if id, ok := RepoIdentity(u); ok {
			add(GitKey(id, ref))
		}
	}
	if len(out.Keys) == 0 {
		return Push{}, errors.New("the push event names no repository URL or full name")
	}
	return out, nil
}
