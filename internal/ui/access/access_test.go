package access

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// verified is a request whose TLS connection presented a verified client certificate for cn.
func verified(cn string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{Subject: pkix.Name{CommonName: cn}}}}}
	return r
}

func TestProxyBelievesHeadersOnlyFromItsCertificate(t *testing.T) {
	a := Proxy{Names: []string{"ui-proxy"}}

	plain := httptest.NewRequest(http.MethodGet, "/", nil)
	plain.Header.Set(HeaderUser, "admin")
	if _, err := a.Authenticate(plain); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("headers without a client certificate: %v, want ErrUnauthenticated", err)
	}
	other := verified("tenant-pod")
	other.Header.Set(HeaderUser, "admin")
	if _, err := a.Authenticate(other); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("a certificate of another name: %v, want ErrUnauthenticated", err)
	}
	if _, err := a.Authenticate(verified("ui-proxy")); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("the proxy without a user header: %v, want ErrUnauthenticated", err)
	}

	r := verified("ui-proxy")
	r.Header.Set(HeaderUser, " jane ")
	r.Header.Add(HeaderGroup, "sites-shop, platform")
	r.Header.Add(HeaderGroup, "platform")
	p, err := a.Authenticate(r)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"system:authenticated", "sites-shop", "platform"}
	if p.User != "jane" || len(p.Groups) != len(want) {
		t.Fatalf("person %+v, want jane in %v", p, want)
	}
	for i := range want {
		if p.Groups[i] != want[i] {
			t.Fatalf("groups %v, want %v", p.Groups, want)
		}
	}
}

func TestLocalTradesItsTokenOnly(t *testing.T) {
	l, err := NewLocal(Person{User: "me"})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"", "guess", l.Token() + "x"} {
		r := httptest.NewRequest(http.MethodGet, "/?token="+bad, nil)
		r.AddCookie(&http.Cookie{Name: CookieName, Value: bad})
		if _, err := l.Authenticate(r); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("token %q: %v, want ErrUnauthenticated", bad, err)
		}
	}
	r := httptest.NewRequest(http.MethodGet, "/?token="+l.Token(), nil)
	if p, err := l.Authenticate(r); err != nil || p.User != "me" {
		t.Errorf("the token: %+v, %v", p, err)
	}
	c := l.SessionCookie(true)
	if !c.HttpOnly || !c.Secure || c.SameSite != http.SameSiteStrictMode {
		t.Errorf("session cookie %+v: want HttpOnly, Secure and SameSite=Strict", c)
	}
	r = httptest.NewRequest(http.MethodGet, "/", nil)
	r.AddCookie(c)
	if p, err := l.Authenticate(r); err != nil || p.User != "me" {
		t.Errorf("the cookie: %+v, %v", p, err)
	}
}

// countingReviewer allows what allow says and counts the questions.
type countingReviewer struct {
	asked int
	allow func(Person, Check) bool
	err   error
}

func (r *countingReviewer) Review(_ context.Context, p Person, c Check) (bool, error) {
	r.asked++
	return r.allow(p, c), r.err
}

func TestAuthorizerKeepsAnswersForSecondsPerPerson(t *testing.T) {
	rv := &countingReviewer{allow: func(p Person, c Check) bool { return p.User == "admin" || c.Namespace == "shop" }}
	a := NewAuthorizer(rv, 5*time.Second)
	now := time.Unix(1000, 0)
	a.now = func() time.Time { return now }
	ctx := context.Background()
	check := Check{Verb: "list", Group: "deco.sites", Resource: "decofiles", Namespace: "blog"}

	if a.Allowed(ctx, Person{User: "tenant"}, check) {
		t.Fatal("the tenant may read blog")
	}
	if !a.Allowed(ctx, Person{User: "admin"}, check) {
		t.Fatal("an admin's answer was taken from the tenant's")
	}
	a.Allowed(ctx, Person{User: "tenant"}, check)
	if rv.asked != 2 {
		t.Errorf("asked %d times, want 2: one per person within the TTL", rv.asked)
	}
	// The same user in other groups is another person.
	a.Allowed(ctx, Person{User: "tenant", Groups: []string{"platform"}}, check)
	if rv.asked != 3 {
		t.Errorf("asked %d times, want 3", rv.asked)
	}
	now = now.Add(6 * time.Second)
	a.Allowed(ctx, Person{User: "tenant"}, check)
	if rv.asked != 4 {
		t.Errorf("asked %d times after the TTL, want 4", rv.asked)
	}

	failing := NewAuthorizer(&countingReviewer{allow: func(Person, Check) bool { return true }, err: errors.New("API server down")}, 0)
	if failing.Allowed(ctx, Person{User: "admin"}, check) {
		t.Error("an error was taken for an allowance")
	}
}
