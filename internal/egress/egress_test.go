package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"strings"
	"testing"
)

var names = Settings{Hosts: "--hosts", Private: "--private", Schemes: "--schemes"}

func TestCheckAddr(t *testing.T) {
	strict := MustNew(Config{Settings: names})
	open := MustNew(Config{AllowPrivate: true, Settings: names})
	listed := MustNew(Config{Hosts: []string{"git.internal", "db.internal:5432", "10.1.0.0/16", "127.0.0.2", "[::1]:22"}, Settings: names})
	cases := []struct {
		p       *Policy
		host    string
		ip      string
		port    string
		allowed bool
		mention []string
	}{
		{strict, "example.com", "93.184.216.34", "443", true, nil},
		{strict, "example.com", "2606:2800:220:1::1", "443", true, nil},
		{strict, "x", "127.0.0.1", "80", false, []string{"loopback", "--hosts"}},
		{strict, "x", "::1", "80", false, []string{"loopback"}},
		{strict, "x", "::ffff:127.0.0.1", "80", false, []string{"loopback"}},
		{strict, "metadata", "169.254.169.254", "80", false, []string{"link-local"}},
		{strict, "x", "fe80::1", "80", false, []string{"link-local"}},
		{strict, "x", "0.0.0.0", "80", false, []string{"unspecified"}},
		{strict, "x", "::", "80", false, []string{"unspecified"}},
		{strict, "x", "239.1.2.3", "80", false, []string{"multicast"}},
		{strict, "x", "10.0.0.1", "80", false, []string{"private", "--hosts", "--private"}},
		{strict, "x", "172.16.5.4", "80", false, []string{"private"}},
		{strict, "x", "192.168.1.1", "80", false, []string{"private"}},
		{strict, "x", "fd00::1", "80", false, []string{"private"}},
		{strict, "x", "100.64.1.1", "80", false, []string{"private"}},
		{strict, "x", "64:ff9b::7f00:1", "80", false, []string{"loopback"}},
		{strict, "x", "255.255.255.255", "80", false, []string{"reserved"}},
		{open, "x", "10.0.0.1", "80", true, nil},
		{open, "x", "100.64.1.1", "80", true, nil},
		{open, "x", "127.0.0.1", "80", false, []string{"loopback"}},
		{open, "x", "169.254.169.254", "80", false, []string{"link-local"}},
		{listed, "GIT.internal.", "10.9.9.9", "443", true, nil},
		{listed, "db.internal", "10.9.9.9", "5432", true, nil},
		{listed, "db.internal", "10.9.9.9", "80", false, []string{"private"}},
		{listed, "anything", "10.1.2.3", "80", true, nil},
		{listed, "anything", "127.0.0.2", "80", true, nil},
		{listed, "anything", "127.0.0.3", "80", false, nil},
		{listed, "::1", "::1", "22", true, nil},
		{listed, "::1", "::1", "23", false, nil},
	}
	for _, c := range cases {
		err := c.p.CheckAddr(c.host, netip.MustParseAddr(c.ip), c.port)
		if c.allowed != (err == nil) {
			t.Errorf("%s (%s):%s allowed=%v, got %v", c.host, c.ip, c.port, c.allowed, err)
			continue
		}
		if err != nil && !IsRefused(err) {
			t.Errorf("%s: not a Refused error: %v", c.ip, err)
		}
		for _, m := range c.mention {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("%s: %q does not mention %q", c.ip, err, m)
			}
		}
	}
}

// TestRefusalSuggestsOnlyThatPort: the entry a refusal suggests allows the refused destination
// and no other port of it; a bare host or IP, as before, allows every port.
func TestRefusalSuggestsOnlyThatPort(t *testing.T) {
	strict := MustNew(Config{Settings: names})
	suggested := regexp.MustCompile(`add (\S+) to --hosts`)
	for _, c := range []struct{ host, ip, port, want string }{
		{"x", "127.0.0.1", "8080", "x:8080"},
		{"127.0.0.1", "127.0.0.1", "8080", "127.0.0.1:8080"},
		{"", "127.0.0.1", "8080", "127.0.0.1:8080"},
		{"Git.Internal.", "10.0.0.1", "443", "git.internal:443"},
		{"::1", "::1", "22", "[::1]:22"},
		{"metadata", "169.254.169.254", "80", "metadata:80"},
	} {
		err := strict.CheckAddr(c.host, netip.MustParseAddr(c.ip), c.port)
		m := suggested.FindStringSubmatch(fmt.Sprint(err))
		if m == nil || m[1] != c.want {
			t.Errorf("%s (%s):%s: %v; want it to suggest %s", c.host, c.ip, c.port, err, c.want)
			continue
		}
		p, err := New(Config{Hosts: []string{m[1]}, Settings: names})
		if err != nil {
			t.Errorf("the suggested entry %q is not accepted: %v", m[1], err)
			continue
		}
		if err := p.CheckAddr(c.host, netip.MustParseAddr(c.ip), c.port); err != nil {
			t.Errorf("with %q: %s:%s still refused: %v", m[1], c.ip, c.port, err)
		}
		if err := p.CheckAddr(c.host, netip.MustParseAddr(c.ip), "6379"); err == nil {
			t.Errorf("with %q: port 6379 of %s is allowed too", m[1], c.ip)
		}
	}
	bare := MustNew(Config{Hosts: []string{"git.internal", "127.0.0.1"}, Settings: names})
	for _, port := range []string{"443", "6379"} {
		if err := bare.CheckAddr("git.internal", netip.MustParseAddr("10.0.0.1"), port); err != nil {
			t.Errorf("a bare host no longer allows port %s: %v", port, err)
		}
		if err := bare.CheckAddr("x", netip.MustParseAddr("127.0.0.1"), port); err != nil {
			t.Errorf("a bare IP no longer allows port %s: %v", port, err)
		}
	}
}

func TestNewRejectsBadEntries(t *testing.T) {
	for _, c := range []Config{{Schemes: []string{"gopher"}}, {Hosts: []string{"a/b"}}, {Hosts: []string{"host:port"}}, {Hosts: []string{"u@h"}}} {
		if _, err := New(c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

func TestSchemes(t *testing.T) {
	p := MustNew(Config{Settings: names})
	if !p.AllowsScheme("HTTPS") || !p.AllowsScheme("ssh") || p.AllowsScheme("http") || p.AllowsScheme("file") {
		t.Fatal("default schemes are not https and ssh only")
	}
	err := p.CheckScheme("http")
	if !IsRefused(err) || !strings.Contains(err.Error(), "--schemes") {
		t.Fatalf("http: %v", err)
	}
}

// TestDialChecksTheConnectedAddress dials a real loopback listener through a host name: the
// check runs on the resolved address, so a name does not get around it.
func TestDialChecksTheConnectedAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	ctx := context.Background()
	strict := MustNew(Config{Settings: names})
	_, err = strict.DialContext(ctx, "tcp", net.JoinHostPort("localhost", port))
	var r *Refused
	if !errors.As(err, &r) || r.What != "loopback" || !strings.Contains(err.Error(), "add localhost:"+port+" to --hosts") {
		t.Fatalf("dial localhost: %v", err)
	}
	allowed := MustNew(Config{Hosts: []string{"localhost"}})
	c, err := allowed.DialContext(ctx, "tcp", net.JoinHostPort("localhost", port))
	if err != nil {
		t.Fatalf("allowed host: %v", err)
	}
	_ = c.Close()
}

// TestTransportRefusesRedirectToLoopback: a public-looking first hop is not modelled here (every
// local server is loopback), so the first server is allowed by address and redirects to another
// loopback port that is not.
func TestTransportRefusesRedirectToLoopback(t *testing.T) {
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("internal secret"))
	}))
	defer internal.Close()
	front := httptest.NewServer(http.RedirectHandler(strings.Replace(internal.URL, "127.0.0.1", "localhost", 1)+"/admin", http.StatusFound))
	defer front.Close()
	p := MustNew(Config{Schemes: []string{"http"}, Hosts: []string{front.Listener.Addr().String()}})
	resp, err := (&http.Client{Transport: p.Transport()}).Get(front.URL)
	if err == nil {
		_ = resp.Body.Close()
		t.Fatal("the redirect to a loopback address was followed")
	}
	if !IsRefused(err) {
		t.Fatalf("want a refusal, got %v", err)
	}
	// Scheme rules apply to every hop too.
	strictScheme := MustNew(Config{Hosts: []string{"127.0.0.0/8"}})
	resp, err = (&http.Client{Transport: strictScheme.Transport()}).Get(front.URL)
	if err == nil {
		_ = resp.Body.Close()
	}
	if !IsRefused(err) {
		t.Fatalf("http allowed by default: %v", err)
	}
}

// TestRedactNeverShowsCredentials: a URL's password never reaches a message, not even when the
// URL does not parse; an ssh user name stays.
func TestRedactNeverShowsCredentials(t *testing.T) {
	for raw, want := range map[string]string{
		"https://user:s3cret@git.example/r.git": "https://git.example/r.git",
		"https://git.example/r.git":             "https://git.example/r.git",
		"https://u:s3cret@ho st/x":              "(unparsable URL)",
		"https://user:s3cret@git.example:x/r%":  "(unparsable URL)",
		"ssh://git@git.example/r.git":           "ssh://git@git.example/r.git",
		"ssh://git:s3cret@git.example/r.git":    "ssh://git.example/r.git",
	} {
		if got := Redact(raw); got != want || strings.Contains(got, "s3cret") {
			t.Errorf("Redact(%q) = %q, want %q", raw, got, want)
		}
	}
}
