package rollout_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/siteops/siteops/internal/decofile/rollout"
)

// BenchmarkDecodeBin decodes a 4 MiB Decofile as stored, and a 1 GiB brotli bomb refused at a
// 4 MiB bound: the bomb costs no more than the real content.
func BenchmarkDecodeBin(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("{")
	for i := 0; sb.Len() < 4<<20; i++ {
		fmt.Fprintf(&sb, `"pages/p%d":{"__resolveType":"website/pages/Page.tsx","path":"/p/%d","title":"Page %d"},`, i, i, i*7919)
	}
	content := strings.TrimSuffix(sb.String(), ",") + "}"
	real := brotliBase64(b, []byte(content))
	bomb := brotliBomb(b)
	for _, c := range []struct {
		name, value string
		limit       int64
	}{{"content-4MiB", real, int64(len(content))}, {"bomb-1GiB-at-4MiB", bomb, 4 << 20}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(c.limit)
			for b.Loop() {
				_, _, _ = rollout.DecodeBin(c.value, c.limit, c.limit)
			}
		})
	}
}

func TestDecodeBin(t *testing.T) {
	content := []byte(strings.Repeat(`{"a":"bcdefgh"}`, 10_000))
	value := brotliBase64(t, content)
	n := int64(len(content))
	for _, c := range []struct {
		limit, hint int64
		ok          bool
	}{{n, n, true}, {n, 0, true}, {n + 1, 0, true}, {n - 1, 0, false}, {n - 1, n - 1, false}, {1, 0, false}} {
		got, sum, err := rollout.DecodeBin(value, c.limit, c.hint)
		switch {
		case c.ok && (err != nil || string(got) != string(content) || sum != sha(content)):
			t.Errorf("limit %d hint %d: %d bytes, %v", c.limit, c.hint, len(got), err)
		case !c.ok && !errors.Is(err, rollout.ErrContentTooLarge):
			t.Errorf("limit %d hint %d: %v, want ErrContentTooLarge", c.limit, c.hint, err)
		}
	}
	if _, _, err := rollout.DecodeBin("not base64 of brotli!", n, 0); !errors.Is(err, rollout.ErrInvalidStoredContent) {
		t.Errorf("garbage: %v, want ErrInvalidStoredContent", err)
	}
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
