package jsonx

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Scanner walks JSON text strictly, for the one-pass readers of the shapes
// the hot paths see most (a streamed chunk, a chat request). Such a reader
// reads its shape with a Scanner and hands anything else, from an escaped key
// to a number it does not expect, to encoding/json, so what it decodes is
// always what encoding/json would have. Every method reports false on a byte
// outside the shape, leaving the Scanner somewhere inside the text.
type Scanner struct {
	b []byte
	i int
}

// NewScanner returns a Scanner at the start of b.
func NewScanner(b []byte) Scanner { return Scanner{b: b} }

// Space skips white space.
func (s *Scanner) Space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// Peek returns the next byte that is not white space (0 at the end).
func (s *Scanner) Peek() byte {
	s.Space()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// Eat consumes ch if it is the next byte that is not white space.
func (s *Scanner) Eat(ch byte) bool {
	if s.Peek() != ch {
		return false
	}
	s.i++
	return true
}

// End reports whether only white space is left.
func (s *Scanner) End() bool {
	s.Space()
	return s.i == len(s.b)
}

// Object reads an object, calling field after each key (a string without
// escapes) with the Scanner at its value, which field must read.
func (s *Scanner) Object(field func(key []byte) bool) bool {
	if !s.Eat('{') {
		return false
	}
	if s.Eat('}') {
		return true
	}
	for {
		key, ok := s.PlainString()
		if !ok || !s.Eat(':') || !field(key) {
			return false
		}
		if s.Eat('}') {
			return true
		}
		if !s.Eat(',') {
			return false
		}
	}
}

// Fields reads an object whose keys are looked up in names: field is called
// with the Scanner at the value of each key spelt as one of them, with the
// name's index (below 64), and must read it. Other keys are skipped. It
// gives up on a key repeated or spelt in another case, whose value
// encoding/json would take differently.
func (s *Scanner) Fields(names *Names, field func(i int) bool) bool {
	var seen uint64
	return s.Object(func(key []byte) bool {
		i := names.Index(key)
		if i < 0 {
			return !names.Folds(key) && s.Skip()
		}
		if i >= 64 || seen&(1<<i) != 0 {
			return false
		}
		seen |= 1 << i
		return field(i)
	})
}

// Array reads an array, calling elem with the Scanner at each element, which
// elem must read.
func (s *Scanner) Array(elem func() bool) bool {
	if !s.Eat('[') {
		return false
	}
	if s.Eat(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if s.Eat(']') {
			return true
		}
		if !s.Eat(',') {
			return false
		}
	}
}

// PlainString reads a string without escapes and returns its contents.
func (s *Scanner) PlainString() ([]byte, bool) {
	if !s.Eat('"') {
		return nil, false
	}
	start := s.i
	for s.i < len(s.b) {
		switch ch := s.b[s.i]; {
		case ch == '"':
			s.i++
			return s.b[start : s.i-1], true
		case ch == '\\', ch < 0x20:
			return nil, false
		}
		s.i++
	}
	return nil, false
}

// String reads a string and returns its value.
func (s *Scanner) String() (string, bool) {
	if s.Peek() != '"' {
		return "", false
	}
	start := s.i
	s.i++
	plain := true
	for s.i < len(s.b) {
		switch ch := s.b[s.i]; {
		case ch == '"':
			s.i++
			raw := s.b[start:s.i]
			if plain && utf8.Valid(raw) {
				return string(raw[1 : len(raw)-1]), true
			}
			return Unquote(raw), true
		case ch == '\\':
			plain = false
			if !s.escape() {
				return "", false
			}
			continue
		case ch < 0x20:
			return "", false
		}
		s.i++
	}
	return "", false
}

// escape skips one escape sequence at s.i (at its backslash) and says
// whether it is valid JSON.
func (s *Scanner) escape() bool {
	s.i++
	if s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case 'b', 'f', 'n', 'r', 't', '"', '\\', '/':
		s.i++
		return true
	case 'u':
		if len(s.b)-s.i < 5 {
			return false
		}
		for _, ch := range s.b[s.i+1 : s.i+5] {
			if !(ch >= '0' && ch <= '9' || ch >= 'a' && ch <= 'f' || ch >= 'A' && ch <= 'F') {
				return false
			}
		}
		s.i += 5
		return true
	}
	return false
}

// skipString skips a string without decoding it.
func (s *Scanner) skipString() bool {
	if !s.Eat('"') {
		return false
	}
	for s.i < len(s.b) {
		switch ch := s.b[s.i]; {
		case ch == '"':
			s.i++
			return true
		case ch == '\\':
			if !s.escape() {
				return false
			}
			continue
		case ch < 0x20:
			return false
		}
		s.i++
	}
	return false
}

// Literal consumes lit (true, false or null) if it comes next.
func (s *Scanner) Literal(lit string) bool {
	s.Space()
	if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
		s.i += len(lit)
		return true
	}
	return false
}

// Bool reads true or false.
func (s *Scanner) Bool() (v, ok bool) {
	switch s.Peek() {
	case 't':
		return true, s.Literal("true")
	case 'f':
		return false, s.Literal("false")
	}
	return false, false
}

// scalar skips a string, number, true, false or null.
func (s *Scanner) scalar() bool {
	switch s.Peek() {
	case '"':
		return s.skipString()
	case 't':
		return s.Literal("true")
	case 'f':
		return s.Literal("false")
	case 'n':
		return s.Literal("null")
	}
	return s.number()
}

// number skips a JSON number.
func (s *Scanner) number() bool {
	s.Space()
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	start := s.i
	if !s.digits() || s.b[start] == '0' && s.i-start > 1 {
		return false // no digits, or a leading zero
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if !s.digits() {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if !s.digits() {
			return false
		}
	}
	return true
}

// digits skips one or more digits.
func (s *Scanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}

// Int reads a plain integer of up to 18 digits: no fraction, no exponent.
func (s *Scanner) Int() (int64, bool) {
	s.Space()
	neg := s.i < len(s.b) && s.b[s.i] == '-'
	if neg {
		s.i++
	}
	digits := s.i
	var v int64
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		v = v*10 + int64(s.b[s.i]-'0')
		s.i++
	}
	nd := s.i - digits
	if nd == 0 || nd > 18 || s.b[digits] == '0' && nd > 1 {
		return 0, false
	}
	if s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		return 0, false
	}
	if neg {
		v = -v
	}
	return v, true
}

// Float reads a number as a float64, as encoding/json does.
func (s *Scanner) Float() (float64, bool) {
	s.Space()
	start := s.i
	if !s.number() {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(s.b[start:s.i]), 64)
	return f, err == nil
}

// maxDepth bounds the nesting Skip and Raw follow; deeper values are
// encoding/json's.
const maxDepth = 16

// Skip skips any value, checking it as strictly as encoding/json does.
func (s *Scanner) Skip() bool { return s.skip(0) }

// Raw reads any value and returns its text, as json.RawMessage holds it.
// The text is part of the scanned buffer, not a copy.
func (s *Scanner) Raw() ([]byte, bool) {
	s.Space()
	start := s.i
	if !s.skip(0) {
		return nil, false
	}
	return s.b[start:s.i], true
}

func (s *Scanner) skip(depth int) bool {
	if depth > maxDepth {
		return false
	}
	switch s.Peek() {
	case '{':
		s.i++
		if s.Eat('}') {
			return true
		}
		for {
			if !s.skipString() || !s.Eat(':') || !s.skip(depth+1) {
				return false
			}
			if s.Eat('}') {
				return true
			}
			if !s.Eat(',') {
				return false
			}
		}
	case '[':
		s.i++
		if s.Eat(']') {
			return true
		}
		for {
			if !s.skip(depth + 1) {
				return false
			}
			if s.Eat(']') {
				return true
			}
			if !s.Eat(',') {
				return false
			}
		}
	}
	return s.scalar()
}

// maxName bounds the length of the names in a Names.
const maxName = 32

// Names is a set of field names, looked up by a one-pass reader for each
// key: by exact spelling to read the field, and as encoding/json matches
// names, ignoring case, to tell a variant spelling of a field (which the
// reader gives up on) from a key to skip.
type Names struct {
	byLen [maxName + 1][]name
	// lower holds the names in lower case, for Folds.
	lower [maxName + 1][]name
}

type name struct {
	s string
	i int
}

// NewNames returns the set of names (each at most 32 bytes); a name's index
// is its position in names.
func NewNames(names ...string) *Names {
	n := &Names{}
	for i, s := range names {
		n.byLen[len(s)] = append(n.byLen[len(s)], name{s, i})
		n.lower[len(s)] = append(n.lower[len(s)], name{strings.ToLower(s), i})
	}
	return n
}

// Index returns the index of the name spelt exactly as key, or -1.
func (n *Names) Index(key []byte) int {
	if len(key) > maxName {
		return -1
	}
	for _, nm := range n.byLen[len(key)] {
		if nm.s == string(key) {
			return nm.i
		}
	}
	return -1
}

// Folds reports whether encoding/json might match key to one of the names.
// Keys with non-ASCII bytes count as matches (encoding/json folds some of
// those too, such as the Kelvin sign).
func (n *Names) Folds(key []byte) bool {
	var low [maxName]byte
	for i, ch := range key {
		switch {
		case ch >= utf8.RuneSelf:
			return true
		case i >= maxName: // keep looking for non-ASCII bytes
		case ch >= 'A' && ch <= 'Z':
			low[i] = ch + 'a' - 'A'
		default:
			low[i] = ch
		}
	}
	if len(key) > maxName {
		return false
	}
	for _, nm := range n.lower[len(key)] {
		if nm.s == string(low[:len(key)]) {
			return true
		}
	}
	return false
}

// Unquote decodes a JSON string literal that a decoder has validated ("" when
// it is not one). The common case, no escapes and valid UTF-8, takes one
// allocation.
func Unquote(b []byte) string {
	if len(b) < 2 || b[len(b)-1] != '"' {
		return ""
	}
	in := b[1 : len(b)-1]
	if utf8.Valid(in) {
		if bytes.IndexByte(in, '\\') < 0 {
			return string(in)
		}
		// Without \u (surrogate pairs) and \/, JSON's escapes are Go's, and
		// strconv is several allocations cheaper than json.
		if !bytes.Contains(in, []byte(`\u`)) && !bytes.Contains(in, []byte(`\/`)) {
			if s, err := strconv.Unquote(string(b)); err == nil {
				return s
			}
		}
	}
	var s string
	_ = json.Unmarshal(b, &s)
	return s
}
