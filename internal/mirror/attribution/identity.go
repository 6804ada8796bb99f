package attribution

import (
	"net/mail"
	"strings"

	"github.com/siteops/siteops/internal/mirror/gitwriter"
	"github.com/siteops/siteops/internal/mirror/store"
)

// DefaultNoreplyDomain is the mail domain of derived author emails when the audit user carries
// none. ".invalid" is reserved (RFC 2606), so a derived address can never reach anyone.
const DefaultNoreplyDomain = "users.noreply.invalid"

// Identity derives git author signatures from Kubernetes users.
type Identity struct {
	// NoreplyDomain is the domain of derived emails; empty means DefaultNoreplyDomain.
	NoreplyDomain string
}

// Signature is the git author for a fact: the display name and email from the user's extra
// claims when present; otherwise the username, with the username itself as email when it is an
// address (OIDC usernames often are, possibly behind a "prefix:"), else a derived noreply
// address. Service accounts keep their system:serviceaccount:<ns>:<name> identity as the name.
func (id Identity) Signature(f store.AuthorFact) gitwriter.Signature {
	name := f.DisplayName
	if name == "" || f.IsServiceAccount {
		name = f.Author
	}
	email := f.Email
	if email == "" && !f.IsServiceAccount {
		email = addressIn(f.Author)
	}
	if email == "" {
		email = id.Noreply(f.Author)
	}
	return gitwriter.Signature{Name: name, Email: email}
}

// CommandSignature is the git author for a command author record, derived like Signature.
func (id Identity) CommandSignature(a store.CommandAuthor) gitwriter.Signature {
	return id.Signature(store.AuthorFact{
		Author: a.Author, DisplayName: a.DisplayName, Email: a.Email,
		IsServiceAccount: store.IsServiceAccountName(a.Author),
	})
}

// addressIn returns username (after its last ':') when it is a plain mail address.
func addressIn(username string) string {
	s := username[strings.LastIndex(username, ":")+1:]
	if !strings.Contains(s, "@") {
		return ""
	}
	a, err := mail.ParseAddress(s)
	if err != nil || a.Address != s || a.Name != "" {
		return ""
	}
	return s
}

// Noreply derives a stable, undeliverable address from a username: the username lowercased,
// with every character outside [a-z0-9._+-] replaced by '-', at NoreplyDomain.
// "system:serviceaccount:ci:deployer" becomes system-serviceaccount-ci-deployer@<domain>.
func (id Identity) Noreply(username string) string {
	domain := id.NoreplyDomain
	if domain == "" {
		domain = DefaultNoreplyDomain
	}
	var b strings.Builder
	for _, r := range strings.ToLower(username) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '.', r == '_', r == '+', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	local := strings.Trim(b.String(), ".-")
	if local == "" {
		local = "unknown"
	}
	if len(local) > 64 {
		local = local[:64]
	}
	return local + "@" + domain
}
