package encode

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/siteops/siteops/internal/decofile/encode/sample"
)

// reference is the canonical form by definition: decode with UseNumber, encode without HTML
// escaping (encoding/json sorts map keys).
func reference(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

var canonicalCases = []string{
	`{"b":1,"a":{"d":[1,2,{"z":null,"y":true}],"c":false}}`,
	` { "k" : "v" , "a" : [ ] , "o" : { } } `,
	`"x & y <b> 'q'"`, `"\u0041\u00e9\n\t\"\\\/"`, `"\u2028 line sep"`, "\"raw \u2028 sep\"",
	"\"invalid \xff utf8\"", `{"dup":1,"dup":2,"a":0}`, `{"\u0062":1,"a":2,"b ":3}`,
	`-0.50e+10`, `1E3`, `0`, `[1.0, 2.50, -3]`, `"emoji 🍎 \ud83c\udf4e"`, `"\ud800 lone"`,
	`{"":1,"a\"b":2}`, `[[[[]]]]`, `null`,
}

func TestCanonicalMatchesEncodingJSON(t *testing.T) {
	for _, c := range canonicalCases {
		want, err := reference([]byte(c))
		if err != nil {
			t.Fatalf("reference(%q): %v", c, err)
		}
		got, err := Canonical([]byte(c))
		if err != nil {
			t.Fatalf("Canonical(%q): %v", c, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("Canonical(%q)\n got %s\nwant %s", c, got, want)
		}
	}
	for n, b := range sample.Generate(sample.Options{Seed: 3, Blocks: 30, TargetBytes: 200 << 10}) {
		want, _ := reference(b)
		got, err := Canonical(b)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("sample block %s differs (%v)", n, err)
		}
	}
}

func TestCanonicalRejectsWhatEncodingJSONRejects(t *testing.T) {
	for _, c := range []string{``, ` `, `{`, `{"a"}`, `{"a":}`, `{a:1}`, `[1,]`, `[1 2]`, `01`, `-`, `1.`, `"unterminated`, "\"ctl \x01\"", `"bad \x escape"`, `tru`, `nul`, `{} {}`, `{"a":1,}`, strings.Repeat("[", 20000)} {
		if _, err := reference([]byte(c)); err == nil {
			t.Fatalf("test premise: encoding/json accepts %q", c)
		}
		if _, err := Canonical([]byte(c)); err == nil {
			t.Errorf("Canonical accepted %q", c)
		}
	}
}

func FuzzCanonical(f *testing.F) {
	for _, c := range canonicalCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		want, werr := reference(raw)
		got, gerr := Canonical(raw)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%q: encoding/json error %v, Canonical error %v", raw, werr, gerr)
		}
		if werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("%q:\n got %s\nwant %s", raw, got, want)
		}
	})
}

// TestMeasureRefusesPastBounds: the scan stops at the first bound passed, naming it, before
// anything is decoded; content within the bounds merges as before.
func TestMeasureRefusesPastBounds(t *testing.T) {
	b := Bounds{Members: 6, Depth: 3, Bytes: 1 << 20}
	for _, c := range []struct {
		raw   string
		bound string
	}{
		{`{"a":[1,2,3],"b":{"c":"x,y,{"}}`, ""},
		{`{"a":[1,2,3,4],"b":{"c":1}}`, BoundMembers},
		{`[[[[1]]]]`, BoundDepth},
		{`{"s":"[[[[[[\"]]]]"}`, ""},
	} {
		_, err := MergeWithin(map[string]json.RawMessage{"x": json.RawMessage(c.raw)}, b)
		var be *BoundError
		switch {
		case c.bound == "" && err != nil:
			t.Errorf("%s: %v", c.raw, err)
		case c.bound != "" && (!errors.As(err, &be) || be.Bound != c.bound):
			t.Errorf("%s: want the %s bound, got %v", c.raw, c.bound, err)
		}
	}
	// Re-encoded strings grow (U+2028 takes 6 bytes escaped): the output is bounded too.
	grow := `"` + strings.Repeat("\u2028", 100) + `"`
	_, err := MergeWithin(map[string]json.RawMessage{"x": json.RawMessage(grow)}, Bounds{Bytes: int64(len(grow) + 20)})
	var be *BoundError
	if !errors.As(err, &be) || be.Bound != BoundBytes {
		t.Fatalf("want the bytes bound, got %v", err)
	}
}
