package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

func TestValidateKeyPrefix(t *testing.T) {
	for _, tc := range []struct {
		name, in, want, errHas string
	}{
		{name: "plain", in: "siteops", want: "siteops"},
		{name: "default", in: DefaultKeyPrefix, want: "siteops"},
		{name: "colon nesting allowed", in: "cell-a:tenant-7", want: "cell-a:tenant-7"},
		{name: "trailing colon normalized", in: "tenant-7:", want: "tenant-7"},
		{name: "several trailing colons normalized", in: "tenant-7::", want: "tenant-7"},
		{name: "dots dashes underscores", in: "a.b-c_d", want: "a.b-c_d"},
		{name: "empty rejected", in: "", errHas: "empty"},
		{name: "only colons rejected", in: ":", errHas: "only ':'"},
		{name: "star rejected", in: "a*", errHas: "glob"},
		{name: "question mark rejected", in: "a?b", errHas: "glob"},
		{name: "open bracket rejected", in: "a[b", errHas: "glob"},
		{name: "close bracket rejected", in: "a]b", errHas: "glob"},
		{name: "backslash rejected", in: `a\b`, errHas: "glob"},
		{name: "percent rejected", in: "a%3Ab", errHas: "'%'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ValidateKeyPrefix(tc.in)
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("ValidateKeyPrefix(%q) = %q, %v; want error containing %q", tc.in, got, err, tc.errHas)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ValidateKeyPrefix(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestEscapeKeyField(t *testing.T) {
	for in, want := range map[string]string{
		"plain":     "plain",
		"a:b":       "a%3Ab",
		"50%":       "50%25",
		"%3A":       "%253A",
		"apps/x:y%": "apps/x%3Ay%25",
	} {
		if got := escapeKeyField(in); got != want {
			t.Errorf("escapeKeyField(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestWatchCursorKeyLayout(t *testing.T) {
	s, err := NewRedisStore(RedisStoreConfig{Addr: "127.0.0.1:1", KeyPrefix: "cell:a:"})
	if err != nil {
		t.Fatal(err)
	}
	if s.KeyPrefix() != "cell:a" {
		t.Fatalf("KeyPrefix = %q", s.KeyPrefix())
	}
	cm := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	dep := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	if got, want := s.watchCursorKey("uid-1", cm, "team:a"), "cell:a:watch:v1:target:uid-1:/configmaps:namespace:team%3Aa:last-rv"; got != want {
		t.Errorf("namespaced key = %q, want %q", got, want)
	}
	if got, want := s.watchCursorKey("u:%", dep, ""), "cell:a:watch:v1:target:u%3A%25:apps/deployments:cluster:last-rv"; got != want {
		t.Errorf("cluster key = %q, want %q", got, want)
	}
	def, _ := NewRedisStore(RedisStoreConfig{Addr: "127.0.0.1:1"})
	if def.KeyPrefix() != DefaultKeyPrefix {
		t.Errorf("empty KeyPrefix gave %q, want %q", def.KeyPrefix(), DefaultKeyPrefix)
	}
	if _, err := NewRedisStore(RedisStoreConfig{Addr: "127.0.0.1:1", KeyPrefix: "a*"}); err == nil {
		t.Error("NewRedisStore accepted a glob prefix")
	}
	if _, err := NewRedisStore(RedisStoreConfig{}); err == nil {
		t.Error("NewRedisStore accepted an empty address")
	}
}

func TestWatchCursorsAgainstRedis(t *testing.T) {
	srv := testenv.Redis(t, servers.RedisOptions{Password: "s3cret"})
	ctx := context.Background()
	bad, _ := NewRedisStore(RedisStoreConfig{Addr: srv.Addr, AuthValue: "wrong"})
	if err := bad.Ping(ctx); err == nil {
		t.Fatal("Ping with a wrong password succeeded")
	}
	s, err := NewRedisStore(RedisStoreConfig{Addr: srv.Addr, AuthValue: "s3cret", DB: 2, KeyPrefix: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	if _, ok := s.LookupWatchCursor(ctx, "uid", gvr, "ns"); ok {
		t.Fatal("cursor found before any record")
	}
	if err := s.RecordWatchCursor(ctx, "uid", gvr, "ns", "41"); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordWatchCursor(ctx, "uid", gvr, "", "7"); err != nil {
		t.Fatal(err)
	}
	if rv, ok := s.LookupWatchCursor(ctx, "uid", gvr, "ns"); !ok || rv != "41" {
		t.Fatalf("namespaced cursor = %q, %v", rv, ok)
	}
	if rv, ok := s.LookupWatchCursor(ctx, "uid", gvr, ""); !ok || rv != "7" {
		t.Fatalf("cluster cursor = %q, %v", rv, ok)
	}
	// Another prefix on the same database is another keyspace.
	other, _ := NewRedisStore(RedisStoreConfig{Addr: srv.Addr, AuthValue: "s3cret", DB: 2, KeyPrefix: "t2"})
	defer other.Close()
	if _, ok := other.LookupWatchCursor(ctx, "uid", gvr, "ns"); ok {
		t.Fatal("a cursor leaked across key prefixes")
	}

	// The exact key is in the database, with the TTL refreshed by every record.
	raw := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "s3cret", DB: 2})
	defer raw.Close()
	key := "t1:watch:v1:target:uid:/configmaps:namespace:ns:last-rv"
	if err := raw.Expire(ctx, key, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordWatchCursor(ctx, "uid", gvr, "ns", "42"); err != nil {
		t.Fatal(err)
	}
	ttl, err := raw.TTL(ctx, key).Result()
	if err != nil || ttl < WatchCursorTTL-time.Minute {
		t.Fatalf("TTL of %s after record = %v, %v; want about %v", key, ttl, err, WatchCursorTTL)
	}
	if v, _ := raw.Get(ctx, key).Result(); v != "42" {
		t.Fatalf("raw value = %q", v)
	}
	// An expired cursor is a miss.
	if err := raw.PExpire(ctx, key, time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Second, func() error {
		if _, ok := s.LookupWatchCursor(ctx, "uid", gvr, "ns"); ok {
			return errString("cursor still there")
		}
		return nil
	})

	// Redis gone: Ping and Record fail, Lookup misses.
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping succeeded with Redis stopped")
	}
	if err := s.RecordWatchCursor(ctx, "uid", gvr, "ns", "43"); err == nil {
		t.Fatal("Record succeeded with Redis stopped")
	}
	if _, ok := s.LookupWatchCursor(ctx, "uid", gvr, ""); ok {
		t.Fatal("Lookup hit with Redis stopped")
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// TestWatchCursorsFollowASentinelFailover: a store given Sentinels instead of an address writes
// to the master they name; when that master is killed and a replica promoted, the cursor written
// before is still there (it was replicated) and new cursors go to the new master.
func TestWatchCursorsFollowASentinelFailover(t *testing.T) {
	set := testenv.SentinelSet(t, servers.SentinelSetOptions{Replicas: 1, Sentinels: 3, Password: "s3cret"})
	ctx := context.Background()
	if _, err := NewRedisStore(RedisStoreConfig{SentinelAddrs: set.SentinelAddrs()}); err == nil || !strings.Contains(err.Error(), "--redis-sentinel-master") {
		t.Fatalf("Sentinels without a master name: %v", err)
	}
	s, err := NewRedisStore(RedisStoreConfig{SentinelAddrs: set.SentinelAddrs(), SentinelMaster: set.MasterName, AuthValue: "s3cret", KeyPrefix: "fo"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	if err := s.RecordWatchCursor(ctx, "uid", gvr, "ns", "41"); err != nil {
		t.Fatal(err)
	}
	// The replica has the cursor before its master goes away.
	replica := redis.NewClient(&redis.Options{Addr: set.Replicas[0].Addr, Password: "s3cret"})
	defer replica.Close()
	testenv.Eventually(t, 10*time.Second, func() error {
		v, err := replica.Get(ctx, "fo:watch:v1:target:uid:/configmaps:namespace:ns:last-rv").Result()
		if err != nil {
			return fmt.Errorf("read the cursor on the replica: %w", err)
		}
		if v != "41" {
			return fmt.Errorf("replica holds %q", v)
		}
		return nil
	})
	if err := set.Master.Kill(); err != nil {
		t.Fatal(err)
	}
	// Once the Sentinels promote the replica, the same store reads the cursor and writes there.
	testenv.Eventually(t, time.Minute, func() error {
		return s.RecordWatchCursor(ctx, "uid", gvr, "ns", "42")
	})
	if rv, ok := s.LookupWatchCursor(ctx, "uid", gvr, "ns"); !ok || rv != "42" {
		t.Fatalf("cursor after the failover = %q, %v; want 42", rv, ok)
	}
	if role, err := replica.Do(ctx, "ROLE").Slice(); err != nil || role[0] != "master" {
		t.Fatalf("the replica is %v (%v) after the failover, want master", role, err)
	}
}
