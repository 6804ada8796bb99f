package store

import (
	"context"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/siteops/siteops/internal/servers"
	"github.com/siteops/siteops/internal/testenv"
)

// BenchmarkRecordFact measures storing one audit fact (exact key + :last, one round trip).
func BenchmarkRecordFact(b *testing.B) {
	srv := testenv.Redis(b, servers.RedisOptions{})
	s, err := NewRedisStore(RedisStoreConfig{Addr: srv.Addr})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	idx := s.AttributionIndex(time.Minute)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		n := strconv.Itoa(i)
		if err := idx.RecordFact(ctx, "r", auditEvent("update", "alice", "ns", "cm-"+n, "uid-"+n, n)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLookupAuthorResolution measures resolving a removal (exact, rv-only and :last keys in
// one MGET), half of them hits.
func BenchmarkLookupAuthorResolution(b *testing.B) {
	srv := testenv.Redis(b, servers.RedisOptions{})
	s, err := NewRedisStore(RedisStoreConfig{Addr: srv.Addr})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	idx := s.AttributionIndex(time.Minute)
	ctx := context.Background()
	for i := range 1000 {
		n := strconv.Itoa(i)
		if err := idx.RecordFact(ctx, "r", auditEvent("update", "alice", "ns", "cm-"+n, "uid-"+n, n)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		n := strconv.Itoa(i % 2000)
		idx.LookupAuthorResolution(ctx, "r", cmGVR, types.UID("uid-"+n), n, false)
	}
}
