package source

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// AnnotationGitHubRepos on a Namespace lists the GitHub repositories ("org/repo" or "org/*",
// comma-separated) that Decofiles of that namespace may read with the operator's GITHUB_TOKEN.
// Namespaces are the platform team's: tenants cannot edit them, so the grant is authority.
const AnnotationGitHubRepos = "deco.sites/github-repos"

// TokenPolicy decides which GitHub token a Decofile may use.
type TokenPolicy struct {
	// Fallback is the operator's own token (GITHUB_TOKEN).
	Fallback string
	// AllowedOrgs may use Fallback at all; "*" allows every org. Matching ignores case.
	AllowedOrgs []string
	// Grants maps a namespace to the repositories ("org/repo" or "org/*") its Decofiles may read
	// with Fallback (--github-token-grants), besides its AnnotationGitHubRepos annotation.
	Grants map[string][]string
	// Namespaces reads a namespace's annotations; nil means only Grants are consulted.
	Namespaces func(ctx context.Context, namespace string) (map[string]string, error)
	// App mints installation tokens scoped to one repository (the operator's GitHub App). It
	// is the platform's credential like Fallback and lent the same way (AllowedOrgs and the
	// namespace's grant); it is asked first, and Fallback is used where the app is not
	// installed.
	App AppTokens
}

// AppTokens returns a token that reads org/repo only, "" when it has none for it.
type AppTokens interface {
	Token(ctx context.Context, org, repo string) (string, error)
}

// Token origins returned by TokenPolicy.Choose.
const (
	TokenFromSecret   = "secret"
	TokenFromFallback = "fallback"
	TokenFromApp      = "app"
	TokenNone         = "none"
)

// Choose returns the token a Decofile of namespace uses for org/repo: its own secretToken when it
// has one, else (when org is allowed and the platform granted namespace that repository) a
// token of the operator's GitHub App for that one repository or the fallback, else none. The
// operator's credentials are never lent further: one tenant cannot read another's private
// repository, nor any repository the operator's token or app happens to reach.
func (p TokenPolicy) Choose(ctx context.Context, namespace, org, repo, secretToken string) (token, from string, err error) {
	if secretToken != "" {
		return secretToken, TokenFromSecret, nil
	}
	if (p.Fallback == "" && p.App == nil) || !p.Allows(org) {
		return "", TokenNone, nil
	}
	granted, err := p.Granted(ctx, namespace, org, repo)
	if err != nil || !granted {
		return "", TokenNone, err
	}
	if p.App != nil {
		token, err := p.App.Token(ctx, org, repo)
		if err != nil {
			return "", TokenNone, err
		}
		if token != "" {
			return token, TokenFromApp, nil
		}
	}
	if p.Fallback == "" {
		return "", TokenNone, nil
	}
	return p.Fallback, TokenFromFallback, nil
}

// Allows reports whether org may use the fallback token at all.
func (p TokenPolicy) Allows(org string) bool {
	for _, o := range p.AllowedOrgs {
		if o == "*" || strings.EqualFold(o, org) {
			return true
		}
	}
	return false
}

// Granted reports whether the platform granted namespace the repository org/repo, by flag or by
// the Namespace's AnnotationGitHubRepos annotation.
func (p TokenPolicy) Granted(ctx context.Context, namespace, org, repo string) (bool, error) {
	if matchRepo(p.Grants[namespace], org, repo) {
		return true, nil
	}
	if p.Namespaces == nil {
		return false, nil
	}
	ann, err := p.Namespaces(ctx, namespace)
	if err != nil {
		return false, &Error{Reason: ReasonUnavailable, Transient: true, Err: fmt.Errorf("read the GitHub grants of namespace %s: %w", namespace, err)}
	}
	return matchRepo(strings.Split(ann[AnnotationGitHubRepos], ","), org, repo), nil
}

// matchRepo reports whether one of patterns ("org/repo" or "org/*", case-insensitive) names
// org/repo.
func matchRepo(patterns []string, org, repo string) bool {
	for _, pat := range patterns {
		po, pr, ok := strings.Cut(strings.TrimSpace(pat), "/")
		if !ok || po == "" || pr == "" || po == "*" {
			continue
		}
		if strings.EqualFold(po, org) && (pr == "*" || strings.EqualFold(pr, repo)) {
			return true
		}
	}
	return false
}

// ParseGrants reads --github-token-grants entries "namespace=org/repo" or "namespace=org/*".
func ParseGrants(entries []string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		ns, pat, ok := strings.Cut(e, "=")
		org, repo, okRepo := strings.Cut(pat, "/")
		if !ok || ns == "" || !okRepo || org == "" || org == "*" || repo == "" || strings.Contains(repo, "/") {
			return nil, fmt.Errorf("grant %q: want namespace=org/repo or namespace=org/*", e)
		}
		out[ns] = append(out[ns], pat)
	}
	return out, nil
}

// NamespaceAnnotations reads namespaces' annotations with r (an uncached reader: one GET when a
// Decofile would use the fallback token).
func NamespaceAnnotations(r client.Reader) func(ctx context.Context, namespace string) (map[string]string, error) {
	return func(ctx context.Context, namespace string) (map[string]string, error) {
		var ns corev1.Namespace
		if err := r.Get(ctx, client.ObjectKey{Name: namespace}, &ns); err != nil {
			return nil, err
		}
		return ns.Annotations, nil
	}
}
