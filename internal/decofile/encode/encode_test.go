package encode

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	decov1 "github.com/siteops/siteops/api/deco/v1alpha1"
)

func TestMergeIsCanonical(t *testing.T) {
	a := map[string]json.RawMessage{
		"b": json.RawMessage(`{"z": 1, "a": {"y": "x & y <b>", "b": [3, 2, 1.50]}}`),
		"a": json.RawMessage(`"plain"`),
	}
	b := map[string]json.RawMessage{
		"a": json.RawMessage(`  "plain" `),
		"b": json.RawMessage(`{"a":{"b":[3,2,1.50],"y":"x & y <b>"},"z":1}`),
	}
	ma, err := Merge(a)
	if err != nil {
		t.Fatal(err)
	}
	mb, err := Merge(b)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"a":"plain","b":{"a":{"b":[3,2,1.50],"y":"x & y <b>"},"z":1}}`
	if string(ma) != want || string(mb) != want {
		t.Fatalf("merge:\n got %s\n and %s\nwant %s", ma, mb, want)
	}
	if Hash(ma) != Hash(mb) || len(Hash(ma)) != 64 {
		t.Fatalf("hashes differ or are not SHA-256 hex: %s %s", Hash(ma), Hash(mb))
	}
}

func TestMergeRejectsInvalidJSON(t *testing.T) {
	for _, bad := range []string{`{"a":`, `{"a":1} {"b":2}`, ``, `nope`} {
		_, err := Merge(map[string]json.RawMessage{"blk": json.RawMessage(bad)})
		if err == nil || !strings.Contains(err.Error(), `"blk"`) {
			t.Errorf("Merge(%q) = %v, want an error naming the block", bad, err)
		}
	}
}

func TestEncodeSmallStaysJSON(t *testing.T) {
	merged := []byte(`{"a":1}`)
	r, err := Encode(merged, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Format != decov1.FormatJSON || r.Key != decov1.KeyJSON || r.Data != string(merged) || r.Attempts != 0 {
		t.Fatalf("got %+v", r)
	}
}

func TestEncodeLargeRoundTrips(t *testing.T) {
	merged := standardMerged(t)
	r, err := Encode(merged, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Format != decov1.FormatBin || r.Key != decov1.KeyBin || r.Level != DefaultLevels[0] || r.Attempts != 1 {
		t.Fatalf("got format %s level %s attempts %d", r.Format, r.Level, r.Attempts)
	}
	back, err := Decode(r.Format, r.Data, int64(len(merged)))
	if err != nil {
		t.Fatal(err)
	}
	if string(back) != string(merged) {
		t.Fatal("decoded content differs from the merged JSON")
	}
	if _, err := Decode(r.Format, r.Data, int64(len(merged)-1)); err == nil {
		t.Fatal("Decode ignored its limit")
	}
}

func TestEncodeBelowThresholdButOverLimitCompresses(t *testing.T) {
	merged := standardMerged(t)[:0]
	merged = append(merged, `{"a":"`...)
	merged = append(merged, strings.Repeat("x", 2<<20)...)
	merged = append(merged, `"}`...)
	r, err := Encode(merged, Options{Threshold: 10 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if r.Format != decov1.FormatBin {
		t.Fatalf("a 2 MiB JSON below the threshold was stored as %s; it cannot fit a ConfigMap uncompressed", r.Format)
	}
}

// TestEncodeEscalates proves the ladder: with a limit between the fast form's and the strongest
// form's sizes, the fast form is rejected and a stronger level is used; below the strongest
// form's size the result is TooLarge with both sizes.
func TestEncodeEscalates(t *testing.T) {
	merged := standardMerged(t)
	levels := []Level{{Quality: 4, LGWin: 20}, {Quality: 7, LGWin: 22}}
	fast, err := Compress(merged, levels[0])
	if err != nil {
		t.Fatal(err)
	}
	strong, err := Compress(merged, levels[1])
	if err != nil {
		t.Fatal(err)
	}
	if len(strong) >= len(fast) {
		t.Fatalf("test premise: %s (%d) is not smaller than %s (%d)", levels[1], len(strong), levels[0], len(fast))
	}
	overhead := timestampReserve
	limit := overhead + (len(fast)+len(strong))/2
	r, err := Encode(merged, Options{Limit: limit, Levels: levels})
	if err != nil {
		t.Fatal(err)
	}
	if r.Level != levels[1] || r.Attempts != 2 || r.Data != strong {
		t.Fatalf("escalation: got level %s after %d attempts, want %s after 2", r.Level, r.Attempts, levels[1])
	}

	_, err = Encode(merged, Options{Limit: overhead + len(strong) - 1, Levels: levels})
	var tl *TooLargeError
	if !errors.As(err, &tl) {
		t.Fatalf("want TooLargeError, got %v", err)
	}
	if tl.RawBytes != len(merged) || tl.StoredBytes != len(strong) || tl.Limit != len(strong)-1 {
		t.Fatalf("TooLargeError sizes: %+v (raw %d strongest %d)", tl, len(merged), len(strong))
	}
	if !strings.Contains(tl.Error(), "target: s3") {
		t.Fatalf("message lacks the s3 advice: %s", tl)
	}
}

// TestDefaultLadderEndsAtStrongest guards the promise that anything whose quality-11 form fits
// is accepted.
func TestDefaultLadderEndsAtStrongest(t *testing.T) {
	last := DefaultLevels[len(DefaultLevels)-1]
	if last.Quality != 11 {
		t.Fatalf("the ladder ends at %s, not quality 11", last)
	}
	for i := 1; i < len(DefaultLevels); i++ {
		if DefaultLevels[i].Quality <= DefaultLevels[i-1].Quality {
			t.Fatalf("ladder not increasing: %v", DefaultLevels)
		}
	}
}

// incompressible is n random bytes: no brotli level makes it smaller.
func incompressible(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEncodeBoundRefusesWithoutTheLadder: content whose quick probe is more than MaxGain times
// the limit is TooLarge at once (Bounded: the levels were not run), with the probe's size.
func TestEncodeBoundRefusesWithoutTheLadder(t *testing.T) {
	merged := incompressible(t, 5<<20)
	_, err := Encode(merged, Options{})
	var tl *TooLargeError
	if !errors.As(err, &tl) {
		t.Fatalf("want TooLargeError, got %v", err)
	}
	if !tl.Bounded || tl.StoredBytes <= MaxGain*tl.Limit || tl.RawBytes != len(merged) {
		t.Fatalf("the ladder ran or the bound is wrong: %+v", tl)
	}
	if !strings.Contains(tl.Error(), "quick setting") || !strings.Contains(tl.Error(), "target: s3") {
		t.Fatalf("message: %s", tl)
	}
}

// TestEncodeBoundKeepsWhatFits: the bound never refuses content whose strongest form fits:
// the standard sample with the limit just above its quality-11 size, and repeats farther apart
// than the first level's window, are still stored.
func TestEncodeBoundKeepsWhatFits(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the strongest level on megabytes")
	}
	x := incompressible(t, 700<<10)
	far := append(append(append([]byte{}, x...), make([]byte, 4500<<10)...), x...)
	for name, merged := range map[string][]byte{"standard sample": standardMerged(t), "far repeats": far} {
		strongest := DefaultLevels[len(DefaultLevels)-1]
		best, err := Compress(merged, strongest)
		if err != nil {
			t.Fatal(err)
		}
		limit := len(best) + timestampReserve
		r, err := Encode(merged, Options{Limit: limit})
		if err != nil {
			t.Fatalf("%s: %v (strongest form %d bytes fits the limit %d)", name, err, len(best), limit)
		}
		if r.Level != strongest {
			t.Fatalf("%s: stored at %s", name, r.Level)
		}
	}
}
