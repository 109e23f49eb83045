package textchat

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/jsonx"
)

// maxDepth bounds the nesting of Python literals, so hostile input cannot
// recurse deeply.
const maxDepth = 64

// parsePyCalls parses the body of a tool_code block: one or more calls
// `name(key=value, ...)` with Python literal arguments, or the single
// positional form `name(value)` for a tool whose schema has exactly one
// property. Dotted names (`default_api.get_weather`) use their last part and a
// `print(...)` wrapper is dropped, as models trained on such blocks write
// them. It returns nil unless the whole body is calls of offered tools.
func parsePyCalls(body string, tools []chat.Tool) []chat.ToolCall {
	p := pyParser{s: body}
	var calls []chat.ToolCall
	for {
		p.skipSpace(true)
		for p.i < len(p.s) && p.s[p.i] == ';' {
			p.i++
			p.skipSpace(true)
		}
		if p.i == len(p.s) {
			return calls
		}
		c, ok := p.call(tools, 0)
		if !ok {
			return nil
		}
		calls = append(calls, c)
	}
}

type pyParser struct {
	s string
	i int
	// out holds the JSON of the call being parsed; scratch decodes strings.
	out     []byte
	scratch []byte
}

// call parses `name(args)` and returns it as a ToolCall.
func (p *pyParser) call(tools []chat.Tool, depth int) (chat.ToolCall, bool) {
	name := p.dottedName()
	p.skipSpace(false)
	if name == "" || !p.eat('(') {
		return chat.ToolCall{}, false
	}
	if name == "print" && depth == 0 {
		c, ok := p.call(tools, depth+1)
		p.skipSpace(true)
		p.eat(',')
		p.skipSpace(true)
		if !ok || !p.eat(')') {
			return chat.ToolCall{}, false
		}
		return c, true
	}
	ti := findTool(tools, name)
	if ti < 0 {
		return chat.ToolCall{}, false
	}
	p.out = append(p.out[:0], '{')
	keys := make([]string, 0, 8) // the usual few keys stay off the heap
	positional := false
	ok := p.items(')', 0, func(int) bool {
		key, ok := p.keyword()
		switch {
		case ok:
			if positional || slices.Contains(keys, key) {
				return false
			}
			if len(keys) > 0 {
				p.out = append(p.out, ',')
			}
			keys = append(keys, key)
			p.out = jsonx.AppendString(p.out, key)
		case len(keys) == 0 && !positional:
			prop, ok := onlyProperty(tools[ti].Parameters)
			if !ok {
				return false
			}
			positional = true
			p.out = jsonx.AppendString(p.out, prop)
		default:
			return false
		}
		p.out = append(p.out, ':')
		p.skipSpace(true)
		return p.value(0)
	})
	if !ok {
		return chat.ToolCall{}, false
	}
	p.out = append(p.out, '}')
	return chat.ToolCall{ID: NewCallID(), Name: name, Arguments: string(p.out)}, true
}

// onlyProperty returns the name of the single property of a JSON schema.
func onlyProperty(schema json.RawMessage) (string, bool) {
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if len(schema) == 0 || json.Unmarshal(schema, &s) != nil || len(s.Properties) != 1 {
		return "", false
	}
	for k := range s.Properties {
		return k, true
	}
	return "", false
}

// skipSpace skips blanks; inside brackets newlines and comments are blanks
// too, and at the top level newlines separate calls.
func (p *pyParser) skipSpace(newlines bool) {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\r':
		case '\n':
			if !newlines {
				return
			}
		case '#':
			for p.i < len(p.s) && p.s[p.i] != '\n' {
				p.i++
			}
			continue
		default:
			return
		}
		p.i++
	}
}

func (p *pyParser) eat(c byte) bool {
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

// items parses comma-separated items up to closer (a trailing comma
// allowed), calling item for each with its index; the items before
// index first are already read, with the comma after the last of them
// still to come.
func (p *pyParser) items(closer byte, first int, item func(n int) bool) bool {
	for n := first; ; n++ {
		p.skipSpace(true)
		if p.eat(closer) {
			return true
		}
		if n > 0 {
			if !p.eat(',') {
				return false
			}
			p.skipSpace(true)
			if p.eat(closer) {
				return true
			}
		}
		if !item(n) {
			return false
		}
	}
}

func (p *pyParser) ident() string {
	start := p.i
	if p.i < len(p.s) && (isIdent(p.s[p.i]) && (p.s[p.i] < '0' || p.s[p.i] > '9')) {
		for p.i < len(p.s) && isIdent(p.s[p.i]) {
			p.i++
		}
	}
	return p.s[start:p.i]
}

// dottedName reads `a.b.c` and returns its last part.
func (p *pyParser) dottedName() string {
	name := p.ident()
	for name != "" && p.eat('.') {
		name = p.ident()
	}
	return name
}

// keyword reads `ident =` (not `==`) and rewinds when there is none.
func (p *pyParser) keyword() (string, bool) {
	start := p.i
	k := p.ident()
	p.skipSpace(true)
	if k != "" && p.eat('=') && !p.eat('=') {
		return k, true
	}
	p.i = start
	return "", false
}

// value parses one Python literal and appends it to p.out as JSON.
func (p *pyParser) value(depth int) bool {
	if depth > maxDepth || p.i >= len(p.s) {
		return false
	}
	switch c := p.s[p.i]; {
	case c == '"' || c == '\'':
		return p.strings()
	case c == '[':
		p.i++
		return p.seq(']', depth)
	case c == '(':
		return p.paren(depth)
	case c == '{':
		p.i++
		return p.dict(depth)
	case c == '-' || c == '+' || c == '.' || c >= '0' && c <= '9':
		return p.number()
	}
	start := p.i
	switch id := p.ident(); id {
	case "True":
		p.out = append(p.out, "true"...)
	case "False":
		p.out = append(p.out, "false"...)
	case "None":
		p.out = append(p.out, "null"...)
	case "r", "R", "u", "U":
		if p.i < len(p.s) && (p.s[p.i] == '"' || p.s[p.i] == '\'') {
			p.i = start
			return p.strings()
		}
		return false
	default:
		return false
	}
	return true
}

// seq parses list (or tuple) items up to close, as a JSON array.
func (p *pyParser) seq(closer byte, depth int) bool {
	p.out = append(p.out, '[')
	ok := p.items(closer, 0, func(n int) bool {
		if n > 0 {
			p.out = append(p.out, ',')
		}
		return p.value(depth + 1)
	})
	p.out = append(p.out, ']')
	return ok
}

// paren parses `(x)` as x and `()` or `(x, ...)` as a tuple (a JSON array).
func (p *pyParser) paren(depth int) bool {
	p.i++
	p.skipSpace(true)
	if p.eat(')') {
		p.out = append(p.out, "[]"...)
		return true
	}
	mark := len(p.out)
	if !p.value(depth + 1) {
		return false
	}
	p.skipSpace(true)
	if p.eat(')') {
		return true
	}
	if p.i >= len(p.s) || p.s[p.i] != ',' {
		return false
	}
	// A tuple: wrap what is written so far, then continue as a list.
	p.out = append(p.out, 0)
	copy(p.out[mark+1:], p.out[mark:])
	p.out[mark] = '['
	ok := p.items(')', 1, func(int) bool {
		p.out = append(p.out, ',')
		return p.value(depth + 1)
	})
	p.out = append(p.out, ']')
	return ok
}

// dict parses `{key: value, ...}`; keys must be strings, numbers, booleans
// or None, which become JSON strings as Python's json.dumps writes them.
func (p *pyParser) dict(depth int) bool {
	p.out = append(p.out, '{')
	ok := p.items('}', 0, func(n int) bool {
		if n > 0 {
			p.out = append(p.out, ',')
		}
		if !p.dictKey(depth) {
			return false
		}
		p.skipSpace(true)
		if !p.eat(':') {
			return false
		}
		p.out = append(p.out, ':')
		p.skipSpace(true)
		return p.value(depth + 1)
	})
	p.out = append(p.out, '}')
	return ok
}

func (p *pyParser) dictKey(depth int) bool {
	mark := len(p.out)
	if !p.value(depth + 1) {
		return false
	}
	k := p.out[mark:]
	switch {
	case len(k) > 0 && k[0] == '"':
		return true
	case len(k) == 0 || k[0] == '[' || k[0] == '{':
		return false // unhashable or nested: not a JSON key
	}
	key := string(k)
	p.out = jsonx.AppendString(p.out[:mark], key)
	return true
}

// number parses a Python int or float literal and writes a JSON number.
func (p *pyParser) number() bool {
	start := p.i
	if p.s[p.i] == '-' || p.s[p.i] == '+' {
		p.i++
	}
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c >= '0' && c <= '9' || c == '.' || c == '_' || c == 'e' || c == 'E' ||
			(c == '-' || c == '+') && (p.s[p.i-1] == 'e' || p.s[p.i-1] == 'E') {
			p.i++
			continue
		}
		break
	}
	lit := strings.TrimPrefix(p.s[start:p.i], "+")
	if strings.Contains(lit, "_") {
		lit = strings.ReplaceAll(lit, "_", "")
	}
	if isJSONNumber(lit) {
		p.out = append(p.out, lit...)
		return true
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		return false
	}
	p.out = strconv.AppendFloat(p.out, f, 'g', -1, 64)
	return true
}

// isJSONNumber reports whether s is a number in JSON's grammar.
func isJSONNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}

// strings parses one or more adjacent string literals (Python concatenates
// them) and writes one JSON string.
func (p *pyParser) strings() bool {
	p.scratch = p.scratch[:0]
	for n := 0; ; n++ {
		if n > 0 {
			save := p.i
			p.skipSpace(true)
			if p.i >= len(p.s) || !startsString(p.s[p.i:]) {
				p.i = save
				break
			}
		}
		if !p.str() {
			return false
		}
	}
	if !utf8.Valid(p.scratch) {
		return false
	}
	p.out = jsonx.AppendString(p.out, string(p.scratch))
	return true
}

func startsString(s string) bool {
	if s[0] == 'r' || s[0] == 'R' || s[0] == 'u' || s[0] == 'U' {
		s = s[1:]
	}
	return s != "" && (s[0] == '"' || s[0] == '\'')
}

// str decodes one string literal into p.scratch.
func (p *pyParser) str() bool {
	raw := false
	switch p.s[p.i] {
	case 'r', 'R':
		raw = true
		p.i++
	case 'u', 'U':
		p.i++
	}
	if p.i >= len(p.s) {
		return false
	}
	q := p.s[p.i]
	if q != '"' && q != '\'' {
		return false
	}
	quote := p.s[p.i : p.i+1]
	if p.i+2 < len(p.s) && p.s[p.i+1] == q && p.s[p.i+2] == q {
		quote = p.s[p.i : p.i+3]
	}
	p.i += len(quote)
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case strings.HasPrefix(p.s[p.i:], quote):
			p.i += len(quote)
			return true
		case c == '\n' && len(quote) == 1:
			return false
		case c == '\\' && p.i+1 < len(p.s):
			if raw {
				p.scratch = append(p.scratch, c, p.s[p.i+1])
				p.i += 2
				continue
			}
			if !p.escape() {
				return false
			}
			continue
		}
		p.scratch = append(p.scratch, c)
		p.i++
	}
	return false
}

// escape decodes the escape sequence at p.i (a backslash).
func (p *pyParser) escape() bool {
	c := p.s[p.i+1]
	p.i += 2
	switch c {
	case '\n':
	case '\\', '\'', '"':
		p.scratch = append(p.scratch, c)
	case 'x':
		return p.hexEscape(2)
	case 'u':
		return p.hexEscape(4)
	case 'U':
		return p.hexEscape(8)
	default:
		if i := strings.IndexByte(simpleEscapes, c); i >= 0 {
			p.scratch = append(p.scratch, simpleEscaped[i])
			return true
		}
		if c >= '0' && c <= '7' {
			v, n := int(c-'0'), 1
			for n < 3 && p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '7' {
				v = v*8 + int(p.s[p.i]-'0')
				p.i++
				n++
			}
			p.scratch = utf8.AppendRune(p.scratch, rune(v))
			return true
		}
		p.scratch = append(p.scratch, '\\', c) // Python keeps unknown escapes.
	}
	return true
}

// simpleEscapes are the letters of Python's one-letter escapes, and
// simpleEscaped what each stands for.
const (
	simpleEscapes = "nrtbfva"
	simpleEscaped = "\n\r\t\b\f\v\a"
)

func (p *pyParser) hexEscape(n int) bool {
	if p.i+n > len(p.s) {
		return false
	}
	v, err := strconv.ParseUint(p.s[p.i:p.i+n], 16, 32)
	if err != nil || v > utf8.MaxRune {
		return false
	}
	p.i += n
	p.scratch = utf8.AppendRune(p.scratch, rune(v))
	return true
}
