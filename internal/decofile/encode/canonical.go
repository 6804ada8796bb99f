package encode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// canonicalizer writes JSON in canonical form directly from the input bytes, without building
// a tree of interface values: objects' members are sorted by key, numbers and literals are
// copied as written, plain strings are copied, and only strings with escapes or characters
// that need escaping go through encoding/json. The output equals what encoding/json gives for
// the same value decoded with UseNumber (tested against it).
type canonicalizer struct {
	in    []byte
	pos   int
	enc   *json.Encoder
	tmp   bytes.Buffer
	depth int
}

const maxDepth = 10000

type member struct {
	key   string // decoded, for sorting
	raw   []byte // canonical "key":value
	order int
}

func canonicalFast(dst *bytes.Buffer, raw []byte) error {
	c := &canonicalizer{in: raw}
	c.enc = json.NewEncoder(&c.tmp)
	c.enc.SetEscapeHTML(false)
	c.skipSpace()
	if err := c.value(dst); err != nil {
		return err
	}
	c.skipSpace()
	if c.pos != len(c.in) {
		return fmt.Errorf("invalid JSON: data after the first value at offset %d", c.pos)
	}
	return nil
}

func (c *canonicalizer) skipSpace() {
	for c.pos < len(c.in) {
		switch c.in[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

func (c *canonicalizer) errorf(format string, args ...any) error {
	return fmt.Errorf("invalid JSON at offset %d: %s", c.pos, fmt.Sprintf(format, args...))
}

func (c *canonicalizer) value(dst *bytes.Buffer) error {
	if c.pos >= len(c.in) {
		return c.errorf("unexpected end of input")
	}
	switch ch := c.in[c.pos]; {
	case ch == '{':
		return c.object(dst)
	case ch == '[':
		return c.array(dst)
	case ch == '"':
		_, err := c.str(dst)
		return err
	case ch == 't':
		return c.literal(dst, "true")
	case ch == 'f':
		return c.literal(dst, "false")
	case ch == 'n':
		return c.literal(dst, "null")
	case ch == '-' || (ch >= '0' && ch <= '9'):
		return c.number(dst)
	default:
		return c.errorf("unexpected character %q", ch)
	}
}

func (c *canonicalizer) literal(dst *bytes.Buffer, lit string) error {
	if !bytes.HasPrefix(c.in[c.pos:], []byte(lit)) {
		return c.errorf("invalid literal")
	}
	dst.WriteString(lit)
	c.pos += len(lit)
	return nil
}

func (c *canonicalizer) number(dst *bytes.Buffer) error {
	start := c.pos
	for c.pos < len(c.in) {
		ch := c.in[c.pos]
		if (ch >= '0' && ch <= '9') || ch == '-' || ch == '+' || ch == '.' || ch == 'e' || ch == 'E' {
			c.pos++
			continue
		}
		break
	}
	num := c.in[start:c.pos]
	if !json.Valid(num) {
		return c.errorf("invalid number %q", num)
	}
	dst.Write(num)
	return nil
}

// str copies or re-encodes one string and returns its decoded value when it was needed.
func (c *canonicalizer) str(dst *bytes.Buffer) (string, error) {
	start := c.pos
	c.pos++ // opening quote
	plain := true
	for c.pos < len(c.in) {
		ch := c.in[c.pos]
		switch {
		case ch == '"':
			c.pos++
			lit := c.in[start:c.pos]
			if plain && utf8.Valid(lit) && !bytes.Contains(lit, []byte("\u2028")) && !bytes.Contains(lit, []byte("\u2029")) {
				dst.Write(lit)
				return string(lit[1 : len(lit)-1]), nil
			}
			var s string
			if err := json.Unmarshal(lit, &s); err != nil {
				return "", c.errorf("invalid string: %v", err)
			}
			c.tmp.Reset()
			if err := c.enc.Encode(s); err != nil {
				return "", err
			}
			dst.Write(bytes.TrimSuffix(c.tmp.Bytes(), []byte("\n")))
			return s, nil
		case ch == '\\':
			plain = false
			c.pos += 2
		case ch < 0x20:
			return "", c.errorf("control character in string")
		default:
			c.pos++
		}
	}
	return "", c.errorf("unterminated string")
}

func (c *canonicalizer) array(dst *bytes.Buffer) error {
	if c.depth++; c.depth > maxDepth {
		return c.errorf("nested too deeply")
	}
	defer func() { c.depth-- }()
	c.pos++
	dst.WriteByte('[')
	c.skipSpace()
	if c.pos < len(c.in) && c.in[c.pos] == ']' {
		c.pos++
		dst.WriteByte(']')
		return nil
	}
	for first := true; ; first = false {
		if !first {
			dst.WriteByte(',')
		}
		c.skipSpace()
		if err := c.value(dst); err != nil {
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
			dst.WriteByte(']')
			return nil
		default:
			return c.errorf("expected , or ] in array")
		}
	}
}

func (c *canonicalizer) object(dst *bytes.Buffer) error {
	if c.depth++; c.depth > maxDepth {
		return c.errorf("nested too deeply")
	}
	defer func() { c.depth-- }()
	c.pos++
	c.skipSpace()
	if c.pos < len(c.in) && c.in[c.pos] == '}' {
		c.pos++
		dst.WriteString("{}")
		return nil
	}
	var members []member
	for {
		c.skipSpace()
		if c.pos >= len(c.in) || c.in[c.pos] != '"' {
			return c.errorf("expected a string key in object")
		}
		var m bytes.Buffer
		key, err := c.str(&m)
		if err != nil {
			return err
		}
		c.skipSpace()
		if c.pos >= len(c.in) || c.in[c.pos] != ':' {
			return c.errorf("expected : after object key")
		}
		c.pos++
		c.skipSpace()
		m.WriteByte(':')
		if err := c.value(&m); err != nil {
			return err
		}
		members = append(members, member{key: key, raw: m.Bytes(), order: len(members)})
		c.skipSpace()
		if c.pos >= len(c.in) {
			return c.errorf("unterminated object")
		}
		if c.in[c.pos] == ',' {
			c.pos++
			continue
		}
		if c.in[c.pos] == '}' {
			c.pos++
			break
		}
		return c.errorf("expected , or } in object")
	}
	// Sort by key; for duplicate keys the last one wins, as in encoding/json.
	slices.SortStableFunc(members, func(a, b member) int { return strings.Compare(a.key, b.key) })
	dst.WriteByte('{')
	written := 0
	for i, m := range members {
		if i+1 < len(members) && members[i+1].key == m.key {
			continue
		}
		if written > 0 {
			dst.WriteByte(',')
		}
		dst.Write(m.raw)
		written++
	}
	dst.WriteByte('}')
	return nil
}
