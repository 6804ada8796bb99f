package access

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"
)

// ErrUnauthenticated is returned when a request does not say who sent it in a way the UI trusts.
var ErrUnauthenticated = errors.New("not signed in")

// Authenticator tells who sent a request.
type Authenticator interface {
	Authenticate(r *http.Request) (Person, error)
}

// Headers an authenticating proxy sets, as kube-apiserver's request-header authentication names
// them by default.
const (
	HeaderUser  = "X-Remote-User"
	HeaderGroup = "X-Remote-Group"
)

// Proxy trusts the user and group headers of an authenticating proxy (oauth2-proxy, an
// ingress's external auth) only on connections where that proxy presented a client certificate
// the server verified: anyone else setting the headers is refused, not believed.
type Proxy struct {
	// Names, when set, are the certificate common names accepted as the proxy.
	Names []string
}

// Authenticate reads the person from the proxy's headers.
func (a Proxy) Authenticate(r *http.Request) (Person, error) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 || len(r.TLS.VerifiedChains[0]) == 0 {
		return Person{}, errors.Join(ErrUnauthenticated, errors.New("the request did not come from the authenticating proxy (no verified client certificate)"))
	}
	if cn := r.TLS.VerifiedChains[0][0].Subject.CommonName; len(a.Names) > 0 && !slices.Contains(a.Names, cn) {
		return Person{}, errors.Join(ErrUnauthenticated, errors.New("the client certificate is not one of the accepted proxies"))
	}
	user := strings.TrimSpace(r.Header.Get(HeaderUser))
	if user == "" {
		return Person{}, errors.Join(ErrUnauthenticated, errors.New("the proxy sent no "+HeaderUser+" header"))
	}
	p := Person{User: user, Groups: []string{"system:authenticated"}}
	for _, v := range r.Header.Values(HeaderGroup) {
		for g := range strings.SplitSeq(v, ",") {
			if g = strings.TrimSpace(g); g != "" && !slices.Contains(p.Groups, g) {
				p.Groups = append(p.Groups, g)
			}
		}
	}
	return p, nil
}

// CookieName is the session cookie of `siteops ui`.
const CookieName = "siteops-ui"

// Local authenticates the one person `siteops ui` runs for. The address it prints carries a
// random token; the first visit trades it for a cookie, so another local user or a page in
// another tab that guesses the port cannot act with the kubeconfig's rights.
type Local struct {
	// Person is the kubeconfig's identity.
	Person Person
	token  string
}

// NewLocal makes a Local for p with a fresh token.
func NewLocal(p Person) (*Local, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	return &Local{Person: p, token: base64.RawURLEncoding.EncodeToString(b)}, nil
}

// Token is the secret the first visit presents as ?token=.
func (l *Local) Token() string { return l.token }

// Authenticate accepts the session cookie or the token.
func (l *Local) Authenticate(r *http.Request) (Person, error) {
	if c, err := r.Cookie(CookieName); err == nil && l.valid(c.Value) {
		return l.Person, nil
	}
	if l.valid(r.URL.Query().Get("token")) {
		return l.Person, nil
	}
	return Person{}, errors.Join(ErrUnauthenticated, errors.New("open the address siteops ui printed, with its token"))
}

// SessionCookie is the cookie that replaces the token after the first visit.
func (l *Local) SessionCookie(secure bool) *http.Cookie {
	return &http.Cookie{Name: CookieName, Value: l.token, Path: "/", HttpOnly: true, Secure: secure,
		SameSite: http.SameSiteStrictMode, MaxAge: int((12 * time.Hour).Seconds())}
}

func (l *Local) valid(v string) bool {
	return v != "" && subtle.ConstantTimeCompare([]byte(v), []byte(l.token)) == 1
}

// ProxyOr authenticates by the proxy on connections that presented a verified client
// certificate, and by Else on all others: with both an authenticating proxy and OIDC sign-in,
// the proxy's headers count only on its own connections, and a browser's only a session.
type ProxyOr struct {
	Proxy Proxy
	Else  Authenticator
}

// Authenticate picks the proxy or Else by the connection's certificate.
func (a ProxyOr) Authenticate(r *http.Request) (Person, error) {
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
		return a.Proxy.Authenticate(r)
	}
	return a.Else.Authenticate(r)
}
