package settings

import (
	"slices"
	"testing"
)

func settingsOf(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Setting)
	}
	return out
}

func TestServerDefaultsFailEveryDataCheck(t *testing.T) {
	n := DataNode{Addr: "127.0.0.1:6379", Role: "master",
		Config:  map[string]string{"maxmemory": "0", "maxmemory-policy": "noeviction", "proto-max-bulk-len": "536870912", "maxclients": "10000", "timeout": "0"},
		Default: User{Exists: true, Flags: []string{"on", "nopass"}},
	}
	gaps := Gaps(CheckDataNode(n))
	if want := []string{MaxMemory, MaxMemoryPolicy, ProtoMaxBulkLen, MaxClients, DefaultUser}; !slices.Equal(settingsOf(gaps), want) {
		t.Fatalf("gaps %v, want %v", settingsOf(gaps), want)
	}
	for _, g := range gaps {
		if g.Fix == "" || g.Node != n.Addr || g.Role != "master" {
			t.Errorf("gap without a fix or node: %+v", g)
		}
	}
}

func TestSharedNodeSettingsPass(t *testing.T) {
	n := DataNode{Addr: "a", Role: "replica",
		Config:  map[string]string{"maxmemory": "268435456", "maxmemory-policy": "allkeys-lfu", "proto-max-bulk-len": "16777216", "maxclients": "20000", "timeout": "300"},
		Default: User{Exists: true, Flags: []string{"on"}, Passwords: 1},
	}
	if gaps := Gaps(CheckDataNode(n)); len(gaps) != 0 {
		t.Fatalf("gaps %+v", gaps)
	}
	n.Default = User{Exists: true, Flags: []string{"off", "nopass"}}
	if gaps := Gaps(CheckDataNode(n)); len(gaps) != 0 {
		t.Fatalf("a disabled default user is a gap: %+v", gaps)
	}
}

func TestEachSettingOnItsOwn(t *testing.T) {
	good := map[string]string{"maxmemory": "1", "maxmemory-policy": "allkeys-lru", "proto-max-bulk-len": "1048576", "maxclients": "10000", "timeout": "60"}
	for setting, bad := range map[string]map[string]string{
		MaxMemoryPolicy: {"maxmemory-policy": "volatile-lru"},
		ProtoMaxBulkLen: {"proto-max-bulk-len": "536870912"},
		MaxClients:      {"maxclients": "4064"},
		MaxMemory:       {"maxmemory": ""},
	} {
		cfg := map[string]string{}
		for k, v := range good {
			cfg[k] = v
		}
		for k, v := range bad {
			cfg[k] = v
		}
		gaps := Gaps(CheckDataNode(DataNode{Config: cfg, Default: User{Exists: true, Flags: []string{"off"}}}))
		if !slices.Equal(settingsOf(gaps), []string{setting}) {
			t.Errorf("%v: gaps %v, want only %s", bad, settingsOf(gaps), setting)
		}
	}
	// A node that does not report a parameter (a proxy, a managed service) fails that check.
	gaps := Gaps(CheckDataNode(DataNode{Config: map[string]string{}, Default: User{Exists: true, Flags: []string{"off"}}}))
	if len(gaps) != 4 {
		t.Errorf("unreported parameters: gaps %v", settingsOf(gaps))
	}
}

func TestSentinel(t *testing.T) {
	if f := CheckSentinel(Sentinel{Addr: "s", Open: true}); f.OK || f.Fix == "" || f.Setting != SentinelAuth {
		t.Fatalf("open Sentinel: %+v", f)
	}
	if f := CheckSentinel(Sentinel{Addr: "s"}); !f.OK || f.Fix != "" {
		t.Fatalf("Sentinel with a password: %+v", f)
	}
}
