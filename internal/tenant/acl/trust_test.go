package acl

import (
	"context"
	"errors"
	"testing"
)

func TestAllowListMatchesConfiguredNodesOnly(t *testing.T) {
	a, err := ParseAllowList([]string{"10.0.0.5:6379", "10.1.0.0/24", "fd00::7", "valkey-0.valkey-headless.cache.svc", "valkey-1.valkey-headless.cache.svc:6380"})
	if err != nil {
		t.Fatal(err)
	}
	a.resolve = func(_ context.Context, host string) ([]string, error) {
		switch host {
		case "valkey-0.valkey-headless.cache.svc":
			return []string{"10.2.0.9"}, nil
		case "valkey-1.valkey-headless.cache.svc":
			return []string{"10.2.0.10"}, nil
		}
		return nil, errors.New("no such host")
	}
	ctx := context.Background()
	for addr, want := range map[string]bool{
		"10.0.0.5:6379":   true,
		"10.0.0.5:6380":   false, // host:port allows that port only
		"10.1.0.200:7000": true,
		"10.1.1.1:6379":   false,
		"[fd00::7]:6379":  true,
		"10.2.0.9:6379":   true, // resolves from an allowed name
		"10.2.0.10:6380":  true,
		"10.2.0.10:6379":  false,
		"valkey-0.valkey-headless.cache.svc:6379": true,
		"VALKEY-0.valkey-headless.cache.svc.:1":   true,
		"evil.tenant.svc:6379":                    false, // a name is never checked by what it resolves to
		"10.3.0.1:6379":                           false,
		"garbage":                                 false,
	} {
		if got := a.Allows(ctx, addr); got != want {
			t.Errorf("Allows(%q) = %v, want %v", addr, got, want)
		}
	}
	if a.Pinning() {
		t.Error("a configured list pins")
	}
	for _, bad := range []string{"10.0.0.1:port", "user@host", "a b", ":6379"} {
		if _, err := ParseAllowList([]string{bad}); err == nil {
			t.Errorf("ParseAllowList(%q) accepted", bad)
		}
	}
}

func TestEmptyAllowListPinsTheFirstNodesOnly(t *testing.T) {
	a, err := ParseAllowList(nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if !a.Pinning() || !a.needsPin() || a.Allows(ctx, "127.0.0.1:6379") {
		t.Fatal("an empty list trusts nothing before its first discovery")
	}
	if !a.pinFirst([]Node{{Addr: "127.0.0.1:6379", Role: RoleMaster}, {Addr: "127.0.0.1:6380", Role: RoleReplica}}) {
		t.Fatal("first discovery not pinned")
	}
	if a.pinFirst([]Node{{Addr: "127.0.0.1:9999", Role: RoleMaster}}) {
		t.Fatal("a later discovery was pinned too")
	}
	for addr, want := range map[string]bool{"127.0.0.1:6379": true, "127.0.0.1:6380": true, "127.0.0.1:9999": false} {
		if got := a.Allows(ctx, addr); got != want {
			t.Errorf("Allows(%q) = %v, want %v", addr, got, want)
		}
	}
}
