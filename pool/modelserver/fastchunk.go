package modelserver

import "github.com/poolgate/poolgate/internal/jsonx"

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
	p := fastParser{jsonx.NewScanner(b)}
	var sawChoices, sawUsage bool
	ok := p.Object(func(key []byte) bool {
		switch {
		case string(key) == "choices" && !sawChoices:
			sawChoices = true
			return p.choices(c)
		case string(key) == "usage" && !sawUsage:
			sawUsage = true
			return p.usage(&c.Usage)
		}
		return p.other(key)
	})
	return ok && p.End()
}

// knownField says whether key names one of chunk's fields or those of its
// choices, as encoding/json matches them (ignoring ASCII case): such a key
// outside the shape fastChunk reads means the chunk is not of that shape.
func knownField(key []byte) bool { return chunkFields.Folds(key) }

// chunkFields are the lower-case names of chunk's fields and its choices'.
var chunkFields = jsonx.NewNames("choices", "usage", "x_groq", "error", "input_tokens", "prompt_tokens", "prompt_eval_count",
	"output_tokens", "completion_tokens", "eval_count", "delta", "message", "text", "finish_reason",
	"content", "tool_calls", "function_call")

// fastParser is the chunk reader: a jsonx.Scanner with the chunk's shapes.
type fastParser struct{ jsonx.Scanner }

// other passes over the value of a key outside the shape: a field the
// full decoder reads (errors, counts or a variant spelling) makes the chunk
// not of the shape; anything else is skipped.
func (p *fastParser) other(key []byte) bool {
	return !knownField(key) && p.Skip()
}

// text reads a string or null as flexText reads them.
func (p *fastParser) text() (flexText, bool) {
	if p.Literal("null") {
		return "", true
	}
	s, ok := p.String()
	return flexText(s), ok
}

// choices reads an array of at most one choice of the common shape.
func (p *fastParser) choices(c *chunk) bool {
	if !p.Eat('[') {
		return false
	}
	if p.Eat(']') {
		c.Choices = c.Choices[:0]
		if c.Choices == nil {
			c.Choices = []choice{} // empty, not nil, as encoding/json leaves it
		}
		return true
	}
	c.Choices = append(c.Choices[:0], choice{})
	ch := &c.Choices[0]
	var sawDelta, sawMessage, sawFinish bool
	ok := p.Object(func(key []byte) bool {
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
		}
		return p.other(key)
	})
	return ok && p.Eat(']')
}

// delta reads a delta or message holding text (or nothing) and maybe a
// role.
func (p *fastParser) delta(d *delta) bool {
	var sawContent bool
	return p.Object(func(key []byte) bool {
		switch {
		case string(key) == "content" && !sawContent:
			sawContent = true
			var ok bool
			d.Content, ok = p.text()
			return ok
		}
		return p.other(key)
	})
}

// usage reads a usage object of integer counts (others, such as
// prompt_tokens_details, are skipped).
func (p *fastParser) usage(u *usageFields) bool {
	var seen [6]bool
	return p.Object(func(key []byte) bool {
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
			return p.other(key)
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
	v, ok := p.Int()
	*n = flexInt(v)
	return ok
}
