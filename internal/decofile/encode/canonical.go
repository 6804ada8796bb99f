package encode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"unicode/utf8"
)

// canonicalizer writes JSON in canonical form straight from the input bytes, without building a
// tree of interface values: objects' members are sorted by key, numbers and literals are copied
// as written, plain strings are copied, and only strings with escapes or characters that need
// escaping go through encoding/json. The output equals what encoding/json gives for the same
// value decoded with UseNumber (tested against it).
//
// It works in two passes so that memory does not grow with the members or the nesting beyond a
// few bytes each, and time does not grow with the nesting: the first pass validates the input
// and records, per object, its members (12 bytes each: where the key and the value start) in key
// order; the second writes the output once, following those records, into the caller's buffer.
type canonicalizer struct {
	in  []byte
	pos int
	// objects in the order their '{' appears, so one is found by its offset.
	objects []object
	// members of every closed object, each object's run sorted by key; open is the stack of
	// the members of the objects being read.
	members, open []member
	// keys holds the decoded form of keys that had escapes (rare), for sorting.
	keys  []byte
	depth int
	// bounds
	maxDepth int
	maxBytes int
	enc      *json.Encoder
	tmp      bytes.Buffer
}

// member is one object member: its key (decoded, for sorting) and where its value starts.
type member struct {
	key    uint32 // offset of the key's bytes: in the input, or in keys when escaped is set
	keyLen uint32 // length; the high bit says the key is in keys (it had escapes)
	val    uint32 // offset of the value in the input
}

const escapedKey = 1 << 31

// object is one object of the input: where it is and its members' run in members.
type object struct {
	start, end uint32 // offset of '{' and one past '}'
	lo, hi     uint32
}

// maxDepth is the deepest nesting DefaultBounds accept, the same as encoding/json's.
const maxDepth = 10000

func canonicalFast(dst *bytes.Buffer, raw []byte) error {
	return canonicalInto(dst, raw, maxDepth, math.MaxInt)
}

// canonicalInto appends the canonical form of raw to dst, failing once dst holds more than
// maxBytes (strings may grow when they are re-encoded).
func canonicalInto(dst *bytes.Buffer, raw []byte, depth, maxBytes int) error {
	if uint64(len(raw)) >= escapedKey {
		return fmt.Errorf("a JSON value of %d bytes is more than this encoder reads", len(raw))
	}
	c := &canonicalizer{in: raw, maxDepth: depth, maxBytes: maxBytes}
	c.skipSpace()
	if err := c.read(); err != nil {
		return err
	}
	c.skipSpace()
	if c.pos != len(c.in) {
		return fmt.Errorf("invalid JSON: data after the first value at offset %d", c.pos)
	}
	c.open = nil
	c.enc = json.NewEncoder(&c.tmp)
	c.enc.SetEscapeHTML(false)
	start := 0
	for start < len(c.in) && isSpace(c.in[start]) {
		start++
	}
	_, err := c.write(dst, start)
	return err
}

func isSpace(ch byte) bool { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' }

func (c *canonicalizer) skipSpace() {
	for c.pos < len(c.in) && isSpace(c.in[c.pos]) {
		c.pos++
	}
}

func (c *canonicalizer) errorf(format string, args ...any) error {
	return fmt.Errorf("invalid JSON at offset %d: %s", c.pos, fmt.Sprintf(format, args...))
}

// read is the first pass over one value at c.pos: it validates it and records its objects.
func (c *canonicalizer) read() error {
	if c.pos >= len(c.in) {
		return c.errorf("unexpected end of input")
	}
	switch ch := c.in[c.pos]; {
	case ch == '{':
		return c.readObject()
	case ch == '[':
		return c.readArray()
	case ch == '"':
		_, _, err := c.readString()
		return err
	case ch == 't':
		return c.literal("true")
	case ch == 'f':
		return c.literal("false")
	case ch == 'n':
		return c.literal("null")
	case ch == '-' || (ch >= '0' && ch <= '9'):
		return c.number()
	default:
		return c.errorf("unexpected character %q", ch)
	}
}

func (c *canonicalizer) literal(lit string) error {
	if !bytes.HasPrefix(c.in[c.pos:], []byte(lit)) {
		return c.errorf("invalid literal")
	}
	c.pos += len(lit)
	return nil
}

func (c *canonicalizer) number() error {
	start := c.pos
	c.pos = numberEnd(c.in, c.pos)
	if num := c.in[start:c.pos]; !json.Valid(num) {
		return c.errorf("invalid number %q", num)
	}
	return nil
}

func numberEnd(in []byte, pos int) int {
	for pos < len(in) {
		ch := in[pos]
		if (ch >= '0' && ch <= '9') || ch == '-' || ch == '+' || ch == '.' || ch == 'e' || ch == 'E' {
			pos++
			continue
		}
		break
	}
	return pos
}

// readString validates the string at c.pos and returns its end and whether it can be copied as
// written (no escapes, valid UTF-8, no U+2028/U+2029, which encoding/json escapes).
func (c *canonicalizer) readString() (end int, plain bool, err error) {
	start := c.pos
	c.pos++ // opening quote
	plain = true
	for c.pos < len(c.in) {
		ch := c.in[c.pos]
		switch {
		case ch == '"':
			c.pos++
			lit := c.in[start:c.pos]
			if plain && isPlain(lit) {
				return c.pos, true, nil
			}
			var s string
			if err := json.Unmarshal(lit, &s); err != nil {
				return 0, false, c.errorf("invalid string: %v", err)
			}
			return c.pos, false, nil
		case ch == '\\':
			plain = false
			c.pos += 2
		case ch < 0x20:
			return 0, false, c.errorf("control character in string")
		default:
			c.pos++
		}
	}
	return 0, false, c.errorf("unterminated string")
}

func isPlain(lit []byte) bool {
	return bytes.IndexByte(lit, '\\') < 0 && utf8.Valid(lit) && !bytes.Contains(lit, []byte("\u2028")) && !bytes.Contains(lit, []byte("\u2029"))
}

func (c *canonicalizer) enter() error {
	if c.depth++; c.depth > c.maxDepth {
		return c.errorf("nested too deeply")
	}
	return nil
}

func (c *canonicalizer) readArray() error {
	if err := c.enter(); err != nil {
		return err
	}
	defer func() { c.depth-- }()
	c.pos++
	c.skipSpace()
	if c.pos < len(c.in) && c.in[c.pos] == ']' {
		c.pos++
		return nil
	}
	for {
		c.skipSpace()
		if err := c.read(); err != nil {
			return err
		}
		c.skipSpace()
		if c.pos >= len(c.in) {
			return c.errorf("unterminated array")
		}
		switch c.in[c.pos] {
		case ',':
			c.pos++
		case ']':
			c.pos++
			return nil
		default:
			return c.errorf("expected , or ] in array")
		}
	}
}

func (c *canonicalizer) readObject() error {
	if err := c.enter(); err != nil {
		return err
	}
	defer func() { c.depth-- }()
	id := len(c.objects)
	c.objects = append(c.objects, object{start: uint32(c.pos)})
	base := len(c.open)
	c.pos++
	c.skipSpace()
	if c.pos < len(c.in) && c.in[c.pos] == '}' {
		c.pos++
	} else {
		if err := c.readMembers(); err != nil {
			return err
		}
	}
	// Sort by key; for duplicate keys the last one wins, as in encoding/json (write skips the
	// earlier ones), so the sort is stable.
	lo := len(c.members)
	c.members = append(c.members, c.open[base:]...)
	c.open = c.open[:base]
	run := c.members[lo:]
	slices.SortStableFunc(run, func(a, b member) int { return bytes.Compare(c.key(a), c.key(b)) })
	c.objects[id].end, c.objects[id].lo, c.objects[id].hi = uint32(c.pos), uint32(lo), uint32(len(c.members))
	return nil
}

func (c *canonicalizer) readMembers() error {
	for {
		c.skipSpace()
		if c.pos >= len(c.in) || c.in[c.pos] != '"' {
			return c.errorf("expected a string key in object")
		}
		start := c.pos
		end, plain, err := c.readString()
		if err != nil {
			return err
		}
		m := member{key: uint32(start + 1), keyLen: uint32(end - start - 2)}
		if !plain {
			s := unquote(c.in[start:end])
			m.key, m.keyLen = uint32(len(c.keys)), uint32(len(s))|escapedKey
			c.keys = append(c.keys, s...)
		}
		c.skipSpace()
		if c.pos >= len(c.in) || c.in[c.pos] != ':' {
			return c.errorf("expected : after object key")
		}
		c.pos++
		c.skipSpace()
		m.val = uint32(c.pos)
		c.open = append(c.open, m)
		if err := c.read(); err != nil {
			return err
		}
		c.skipSpace()
		if c.pos >= len(c.in) {
			return c.errorf("unterminated object")
		}
		switch c.in[c.pos] {
		case ',':
			c.pos++
		case '}':
			c.pos++
			return nil
		default:
			return c.errorf("expected , or } in object")
		}
	}
}

// key is m's decoded key.
func (c *canonicalizer) key(m member) []byte {
	if m.keyLen&escapedKey != 0 {
		return c.keys[m.key : m.key+m.keyLen&^escapedKey]
	}
	return c.in[m.key : m.key+m.keyLen]
}

// write is the second pass: it appends the canonical form of the (valid) value at pos to dst
// and returns the offset just past it.
func (c *canonicalizer) write(dst *bytes.Buffer, pos int) (int, error) {
	switch c.in[pos] {
	case '{':
		return c.writeObject(dst, pos)
	case '[':
		return c.writeArray(dst, pos)
	case '"':
		return c.writeString(dst, pos)
	case 't':
		dst.WriteString("true")
		return pos + 4, nil
	case 'f':
		dst.WriteString("false")
		return pos + 5, nil
	case 'n':
		dst.WriteString("null")
		return pos + 4, nil
	default:
		end := numberEnd(c.in, pos)
		dst.Write(c.in[pos:end])
		return end, nil
	}
}

func (c *canonicalizer) writeString(dst *bytes.Buffer, pos int) (int, error) {
	end := stringEnd(c.in, pos)
	lit := c.in[pos:end]
	if isPlain(lit) {
		dst.Write(lit)
		return end, nil
	}
	if err := c.writeKey(dst, unquote(lit)); err != nil {
		return 0, err
	}
	return end, c.checkSize(dst)
}

// stringEnd is the offset just past the string starting at pos, which the first pass validated.
func stringEnd(in []byte, pos int) int {
	for i := pos + 1; i < len(in); i++ {
		switch in[i] {
		case '"':
			return i + 1
		case '\\':
			i++
		}
	}
	return len(in)
}

// unquote decodes the string literal lit, which the first pass validated.
func unquote(lit []byte) string {
	var s string
	_ = json.Unmarshal(lit, &s)
	return s
}

// writeKey appends s encoded as encoding/json encodes it.
func (c *canonicalizer) writeKey(dst *bytes.Buffer, s string) error {
	c.tmp.Reset()
	if err := c.enc.Encode(s); err != nil {
		return err
	}
	dst.Write(bytes.TrimSuffix(c.tmp.Bytes(), []byte("\n")))
	return nil
}

func (c *canonicalizer) checkSize(dst *bytes.Buffer) error {
	if dst.Len() > c.maxBytes {
		return &BoundError{Bound: BoundBytes, Limit: int64(c.maxBytes), Found: int64(dst.Len())}
	}
	return nil
}

func (c *canonicalizer) writeArray(dst *bytes.Buffer, pos int) (int, error) {
	dst.WriteByte('[')
	pos = c.skipFrom(pos + 1)
	if c.in[pos] == ']' {
		dst.WriteByte(']')
		return pos + 1, nil
	}
	for {
		end, err := c.write(dst, pos)
		if err != nil {
			return 0, err
		}
		pos = c.skipFrom(end)
		if c.in[pos] == ']' {
			dst.WriteByte(']')
			return pos + 1, c.checkSize(dst)
		}
		dst.WriteByte(',') // read checked it is one
		pos = c.skipFrom(pos + 1)
	}
}

func (c *canonicalizer) writeObject(dst *bytes.Buffer, pos int) (int, error) {
	i, found := slices.BinarySearchFunc(c.objects, uint32(pos), func(o object, p uint32) int { return int(o.start) - int(p) })
	if !found {
		return 0, fmt.Errorf("canonical JSON: no object recorded at offset %d", pos)
	}
	o := c.objects[i]
	dst.WriteByte('{')
	written := 0
	run := c.members[o.lo:o.hi]
	for j, m := range run {
		if j+1 < len(run) && bytes.Equal(c.key(run[j+1]), c.key(m)) {
			continue // a later duplicate wins
		}
		if written > 0 {
			dst.WriteByte(',')
		}
		written++
		if m.keyLen&escapedKey != 0 {
			if err := c.writeKey(dst, string(c.key(m))); err != nil {
				return 0, err
			}
		} else {
			dst.Write(c.in[m.key-1 : m.key+m.keyLen+1])
		}
		dst.WriteByte(':')
		if _, err := c.write(dst, int(m.val)); err != nil {
			return 0, err
		}
	}
	dst.WriteByte('}')
	return int(o.end), c.checkSize(dst)
}

func (c *canonicalizer) skipFrom(pos int) int {
	for pos < len(c.in) && isSpace(c.in[pos]) {
		pos++
	}
	return pos
}
