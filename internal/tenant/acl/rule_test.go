package acl

import (
	"slices"
	"strings"
	"testing"
)

func TestSetUserArgsIsDeclarativeAndScoped(t *testing.T) {
	u := User{Name: "loja", Password: "p1", RetiredHashes: []string{HashPassword("p0"), HashPassword("p1")}}
	args := SetUserArgs(u)
	s := make([]string, len(args))
	for i, a := range args {
		s[i] = a.(string)
	}
	if !slices.Equal(s[:6], []string{"acl", "setuser", "loja", "reset", "on", "#" + HashPassword("p1")}) {
		t.Fatalf("rule must start with reset and the current password's digest, got %v", s[:6])
	}
	if !slices.Contains(s, "#"+HashPassword("p0")) {
		t.Errorf("retired password hash missing: %v", s)
	}
	if n := len(slices.DeleteFunc(slices.Clone(s), func(a string) bool { return a != "#"+HashPassword("p1") })); n != 1 {
		t.Errorf("current password's digest sent %d times, want once: %v", n, s)
	}
	for _, want := range []string{"~loja:*", "~lock:loja:*", "resetchannels", "-@dangerous", "-@admin", "-scan", "-keys", "-flushall"} {
		if !slices.Contains(s, want) {
			t.Errorf("rule lacks %q: %v", want, s)
		}
	}
	for _, a := range s {
		if len(a) > 0 && (a[0] == '~' || a[0] == '%') && a != "~loja:*" && a != "~lock:loja:*" {
			t.Errorf("unexpected key pattern %q", a)
		}
		if a == "allkeys" || a == "allchannels" || a == "+@all" || a == "allcommands" {
			t.Errorf("rule grants %q", a)
		}
	}
}

// TestSetUserArgsNeverCarriesThePassword: the command may reach a node that is not ours (a
// master a tampered Sentinel reports); a digest cannot be used to log in anywhere, a clear
// password could.
func TestSetUserArgsNeverCarriesThePassword(t *testing.T) {
	for _, u := range []User{
		{Name: "loja", Password: "clear-secret-1"},
		{Name: "loja", Password: "clear-secret-1", RetiredHashes: []string{HashPassword("clear-secret-0")}},
		{Name: "loja", Password: "clear-secret-1", PasswordHash: HashPassword("stale")},
	} {
		args := SetUserArgs(u)
		for _, a := range args {
			s := a.(string)
			if strings.Contains(s, "clear-secret") || strings.HasPrefix(s, ">") || strings.HasPrefix(s, "<") {
				t.Fatalf("ACL SETUSER carries a usable password %q: %v", s, args)
			}
		}
		if !slices.Contains(args, any("#"+HashPassword(u.Password))) {
			t.Errorf("ACL SETUSER lacks the current password's digest: %v", args)
		}
	}
}

func TestHashesDeduplicatesAndSorts(t *testing.T) {
	u := User{Name: "a", Password: "x", RetiredHashes: []string{HashPassword("x"), HashPassword("y")}}
	h := u.Hashes()
	if len(h) != 2 || !slices.IsSorted(h) {
		t.Fatalf("Hashes() = %v", h)
	}
}

func TestNewPasswordIsRandomURLSafe(t *testing.T) {
	a, err := NewPassword()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewPassword()
	if a == b || len(a) != 43 {
		t.Fatalf("passwords %q %q", a, b)
	}
	for _, r := range a {
		if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '-' && r != '_' {
			t.Fatalf("password %q is not URL-safe", a)
		}
	}
}

func TestReplicaDown(t *testing.T) {
	for flags, want := range map[string]bool{"slave": false, "s_down,slave": true, "slave,disconnected": false, "o_down,slave": true} {
		if got := ReplicaDown(flags); got != want {
			t.Errorf("ReplicaDown(%q) = %v", flags, got)
		}
	}
}

func TestNewNeedsAnAddress(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without addresses succeeded")
	}
	if _, err := New(Config{SentinelAddrs: []string{"127.0.0.1:1"}}); err == nil {
		t.Fatal("New without master name succeeded")
	}
	if _, err := New(Config{URL: "::bad"}); err == nil {
		t.Fatal("New with a bad URL succeeded")
	}
}

func TestSetUserArgsFromDigestOnly(t *testing.T) {
	u := User{Name: "loja", PasswordHash: HashPassword("p1"), RetiredHashes: []string{HashPassword("p0")}}
	args := SetUserArgs(u)
	if args[5] != "#"+HashPassword("p1") || args[6] != "#"+HashPassword("p0") {
		t.Fatalf("a user known by digest must be applied by digest: %v", args[:7])
	}
	if u.CurrentHash() != HashPassword("p1") || len(u.Hashes()) != 2 {
		t.Fatalf("hashes %v", u.Hashes())
	}
}

func TestValidateRejectsForgedValues(t *testing.T) {
	good := User{Name: "loja", PasswordHash: HashPassword("p"), RetiredHashes: []string{HashPassword("o")}}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, u := range map[string]User{
		"name with a space":  {Name: "lo ja", Password: "p"},
		"name with a colon":  {Name: "a:b", Password: "p"},
		"uppercase name":     {Name: "Loja", Password: "p"},
		"no password":        {Name: "loja"},
		"short digest":       {Name: "loja", PasswordHash: "abc"},
		"garbage retiring":   {Name: "loja", Password: "p", RetiredHashes: []string{"not-a-digest"}},
		"uppercase retiring": {Name: "loja", Password: "p", RetiredHashes: []string{strings.ToUpper(HashPassword("o"))}},
		"rule in retiring":   {Name: "loja", Password: "p", RetiredHashes: []string{HashPassword("o") + " ~* +@all"}},
	} {
		if err := u.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), "not-a-digest") {
			t.Errorf("%s: error quotes the value: %v", name, err)
		}
	}
}
