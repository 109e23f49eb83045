package modelserver

import "unicode/utf8"

// A streamed answer is mostly chunks of one shape: one choice whose delta
// holds a piece of text, maybe a role, and a finish reason; a whole answer is
// the same with a message for the delta, and usage counts. encoding/json
// reads such a chunk twice (it scans the value, then decodes it by
// reflection, calling flexText's UnmarshalJSON for each text field), which
// made it the largest single cost of relaying a stream. fastChunk reads that
// shape in one pass and hands anything else to encoding/json, so the result
// is always what encoding/json would have decoded.

// fastChunk decodes b into c when b is a chunk of the common shape, and
// reports whether it did; false leaves c to be decoded by encoding/json.
// c must be reset.
func fastChunk(b []byte, c *chunk) bool {
	p := fastParser{b: b}
	var sawChoices, sawUsage bool
	ok := p.object(func(key []byte) bool {
		switch {
		case string(key) == "choices" && !sawChoices:
			sawChoices = true
			return p.choices(c)
		case string(key) == "usage" && !sawUsage:
			sawUsage = true
			return p.usage(&c.Usage)
		case knownField(key):
			return false // errors, counts or a variant spelling: the full decoder's
		}
		return p.skip(0)
	})
	p.space()
	return ok && p.i == len(p.b)
}

// knownField says whether key names one of chunk's fields or those of its
// choices, as encoding/json matches them (ignoring ASCII case): such a key
// outside the shape fastChunk reads means the chunk is not of that shape.
func knownField(key []byte) bool {
	var low [24]byte
	if len(key) > len(low) {
		return false
	}
	for i, ch := range key {
		if ch >= utf8.RuneSelf {
			return true // encoding/json folds some non-ASCII letters too: leave it to that
		}
		if ch >= 'A' && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		low[i] = ch
	}
	switch string(low[:len(key)]) {
	case "choices", "usage", "x_groq", "error", "input_tokens", "prompt_tokens", "prompt_eval_count",
		"output_tokens", "completion_tokens", "eval_count", "delta", "message", "text", "finish_reason",
		"content", "tool_calls", "function_call":
		return true
	}
	return false
}

// fastParser walks JSON text strictly; any byte outside the accepted shape
// makes it give up.
type fastParser struct {
	b []byte
	i int
}

func (p *fastParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte (0 at the end).
func (p *fastParser) peek() byte {
	p.space()
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

func (p *fastParser) eat(ch byte) bool {
	if p.peek() != ch {
		return false
	}
	p.i++
	return true
}

// object reads an object, calling field after each key with the parser at
// its value, which field must read.
func (p *fastParser) object(field func(key []byte) bool) bool {
	if !p.eat('{') {
		return false
	}
	if p.eat('}') {
		return true
	}
	for {
		key, ok := p.plainString()
		if !ok || !p.eat(':') || !field(key) {
			return false
		}
		if p.eat('}') {
			return true
		}
		if !p.eat(',') {
			return false
		}
	}
}

// plainString reads a string without escapes and returns its contents.
func (p *fastParser) plainString() ([]byte, bool) {
	if !p.eat('"') {
		return nil, false
	}
	start := p.i
	for p.i < len(p.b) {
		switch ch := p.b[p.i]; {
		case ch == '"':
			p.i++
			return p.b[start : p.i-1], true
		case ch == '\\', ch < 0x20:
			return nil, false
		}
		p.i++
	}
	return nil, false
}

// text reads a string or null as flexText reads them.
func (p *fastParser) text() (flexText, bool) {
	if p.literal("null") {
		return "", true
	}
	if p.peek() != '"' {
		return "", false
	}
	start := p.i
	p.i++
	plain := true
	for p.i < len(p.b) {
		switch ch := p.b[p.i]; {
		case ch == '"':
			p.i++
			raw := p.b[start:p.i]
			if plain && utf8.Valid(raw) {
				return flexText(raw[1 : len(raw)-1]), true
			}
			return flexText(jsonString(raw)), true
		case ch == '\\':
			plain = false
			if !p.escape() {
				return "", false
			}
			continue
		case ch < 0x20:
			return "", false
		}
		p.i++
	}
	return "", false
}

// escape skips one escape sequence at p.i (at its backslash) and says
// whether it is valid JSON.
func (p *fastParser) escape() bool {
	p.i++
	if p.i >= len(p.b) {
		return false
	}
	switch p.b[p.i] {
	case 'b', 'f', 'n', 'r', 't', '"', '\\', '/':
		p.i++
		return true
	case 'u':
		if len(p.b)-p.i < 5 {
			return false
		}
		for _, ch := range p.b[p.i+1 : p.i+5] {
			if !(ch >= '0' && ch <= '9' || ch >= 'a' && ch <= 'f' || ch >= 'A' && ch <= 'F') {
				return false
			}
		}
		p.i += 5
		return true
	}
	return false
}

// skipString skips a string without decoding it.
func (p *fastParser) skipString() bool {
	if !p.eat('"') {
		return false
	}
	for p.i < len(p.b) {
		switch ch := p.b[p.i]; {
		case ch == '"':
			p.i++
			return true
		case ch == '\\':
			if !p.escape() {
				return false
			}
			continue
		case ch < 0x20:
			return false
		}
		p.i++
	}
	return false
}

func (p *fastParser) literal(lit string) bool {
	p.space()
	if len(p.b)-p.i >= len(lit) && string(p.b[p.i:p.i+len(lit)]) == lit {
		p.i += len(lit)
		return true
	}
	return false
}

// scalar skips a string, number, true, false or null; objects and arrays
// make it give up.
func (p *fastParser) scalar() bool {
	switch p.peek() {
	case '"':
		return p.skipString()
	case 't':
		return p.literal("true")
	case 'f':
		return p.literal("false")
	case 'n':
		return p.literal("null")
	}
	return p.number()
}

// number skips a JSON number.
func (p *fastParser) number() bool {
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
	}
	start := p.i
	if !p.digits() || p.b[start] == '0' && p.i-start > 1 {
		return false // no digits, or a leading zero
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if !p.digits() {
			return false
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if !p.digits() {
			return false
		}
	}
	return true
}

// digits skips one or more digits.
func (p *fastParser) digits() bool {
	start := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	return p.i > start
}

// choices reads an array of at most one choice of the common shape.
func (p *fastParser) choices(c *chunk) bool {
	if !p.eat('[') {
		return false
	}
	if p.eat(']') {
		c.Choices = c.Choices[:0]
		if c.Choices == nil {
			c.Choices = []choice{} // empty, not nil, as encoding/json leaves it
		}
		return true
	}
	c.Choices = append(c.Choices[:0], choice{})
	ch := &c.Choices[0]
	var sawDelta, sawMessage, sawFinish bool
	ok := p.object(func(key []byte) bool {
		switch {
		case string(key) == "delta" && !sawDelta:
			sawDelta = true
			return p.delta(&ch.Delta)
		case string(key) == "message" && !sawMessage:
			sawMessage = true
			return p.delta(&ch.Message)
		case string(key) == "finish_reason" && !sawFinish:
			sawFinish = true
			var ok bool
			ch.FinishReason, ok = p.text()
			return ok
		case knownField(key):
			return false
		}
		return p.skip(0)
	})
	return ok && p.eat(']')
}

// delta reads a delta or message holding text (or nothing) and maybe a
// role.
func (p *fastParser) delta(d *delta) bool {
	var sawContent bool
	return p.object(func(key []byte) bool {
		switch {
		case string(key) == "content" && !sawContent:
			sawContent = true
			var ok bool
			d.Content, ok = p.text()
			return ok
		case knownField(key):
			return false
		}
		return p.skip(0)
	})
}

// usage reads a usage object of integer counts (others, such as
// prompt_tokens_details, are skipped).
func (p *fastParser) usage(u *usageFields) bool {
	var seen [6]bool
	return p.object(func(key []byte) bool {
		var n *flexInt
		var i int
		switch string(key) {
		case "input_tokens":
			n, i = &u.InputTokens, 0
		case "prompt_tokens":
			n, i = &u.PromptTokens, 1
		case "prompt_eval_count":
			n, i = &u.PromptEvalCount, 2
		case "output_tokens":
			n, i = &u.OutputTokens, 3
		case "completion_tokens":
			n, i = &u.CompletionTokens, 4
		case "eval_count":
			n, i = &u.EvalCount, 5
		default:
			if knownField(key) {
				return false
			}
			return p.skip(0)
		}
		if seen[i] {
			return false
		}
		seen[i] = true
		return p.count(n)
	})
}

// count reads a plain integer of up to 18 digits (what flexInt reads
// otherwise, from floats to numeric strings, is the full decoder's).
func (p *fastParser) count(n *flexInt) bool {
	p.space()
	neg := p.i < len(p.b) && p.b[p.i] == '-'
	if neg {
		p.i++
	}
	digits := p.i
	var v int64
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		v = v*10 + int64(p.b[p.i]-'0')
		p.i++
	}
	nd := p.i - digits
	if nd == 0 || nd > 18 || p.b[digits] == '0' && nd > 1 {
		return false
	}
	if p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		return false
	}
	if neg {
		v = -v
	}
	*n = flexInt(v)
	return true
}

// maxSkipDepth bounds the nesting skip follows; deeper values are the full
// decoder's.
const maxSkipDepth = 16

// skip skips any JSON value, checking it as strictly as encoding/json does.
func (p *fastParser) skip(depth int) bool {
	if depth > maxSkipDepth {
		return false
	}
	switch p.peek() {
	case '{':
		p.i++
		if p.eat('}') {
			return true
		}
		for {
			if !p.skipString() || !p.eat(':') || !p.skip(depth+1) {
				return false
			}
			if p.eat('}') {
				return true
			}
			if !p.eat(',') {
				return false
			}
		}
	case '[':
		p.i++
		if p.eat(']') {
			return true
		}
		for {
			if !p.skip(depth + 1) {
				return false
			}
			if p.eat(']') {
				return true
			}
			if !p.eat(',') {
				return false
			}
		}
	}
	return p.scalar()
}
