package textchat

import (
	"bytes"
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"

	"github.com/poolgate/poolgate/internal/chat"
)

// parser states.
const (
	// passthrough: no tools offered, every delta is text as it comes.
	statePass uint8 = iota
	// undecided: only whitespace so far; the first real character decides.
	stateUndecided
	// buffering: the answer may be a tool call; hold it until Finish.
	stateBuffering
	// streaming: tools were offered but the answer cannot be a tool call
	// (it starts with plain text or a foreign code fence), so it streams.
	stateStreaming
)

// Parser turns the text deltas of one answer into neutral events. Without
// offered tools it passes text straight through. With tools it holds text
// back while the answer may still be a tool call, and decides in Finish.
//
// It streams earlier than the contract's "hold everything" when that cannot
// leak a call: every accepted call form starts (after whitespace) with '{' or
// a "```json", "```tool_code" or bare "```" fence, so an answer starting
// otherwise is text from its first character on.
//
// A Parser is used by one goroutine. The slices it returns are reused by the
// next call: consume them before calling again.
type Parser struct {
	tools  []chat.Tool
	choice chat.ToolChoice
	state  uint8
	// settled: the buffering decision is final (no need to look again).
	settled bool
	buf     []byte
	out     []chat.Event
}

// NewParser returns a parser for the answer to t.
func NewParser(t *chat.Turn) *Parser {
	p := &Parser{tools: t.Tools, choice: t.ToolChoice}
	if toolsOffered(t.Tools, t.ToolChoice) {
		p.state = stateUndecided
	}
	return p
}

// Text feeds one delta and returns the events it completes (often none while
// a possible tool call is buffered).
func (p *Parser) Text(delta string) []chat.Event {
	if delta == "" {
		return nil
	}
	switch p.state {
	case statePass, stateStreaming:
		return p.text(delta)
	}
	p.buf = append(p.buf, delta...)
	if !p.settled {
		p.state, p.settled = decide(p.buf)
	}
	if p.state != stateStreaming {
		return nil
	}
	s := string(p.buf)
	p.buf = p.buf[:0]
	return p.text(s)
}

// Finish ends the answer: it returns the held-back events (tool calls, or the
// buffered text) and the finish reason, FinishToolCalls when the answer was a
// tool call and FinishStop otherwise.
func (p *Parser) Finish() ([]chat.Event, chat.FinishReason) {
	if len(p.buf) == 0 {
		return nil, chat.FinishStop
	}
	s := string(p.buf)
	p.buf = p.buf[:0]
	if p.state == stateBuffering {
		if calls := ParseToolCalls(s, p.tools, p.choice); len(calls) > 0 {
			p.out = p.out[:0]
			for _, c := range calls {
				p.out = append(p.out, chat.Event{Type: chat.EventToolCall, ToolCall: c})
			}
			return p.out, chat.FinishToolCalls
		}
	}
	return p.text(s), chat.FinishStop
}

func (p *Parser) text(s string) []chat.Event {
	p.out = append(p.out[:0], chat.Event{Type: chat.EventText, Text: s})
	return p.out
}

// decide classifies the buffered start of an answer while tools are offered;
// final says that more text cannot change the decision.
func decide(b []byte) (state uint8, final bool) {
	b = bytes.TrimLeft(b, space)
	switch {
	case len(b) == 0:
		return stateUndecided, false
	case b[0] == '{':
		return stateBuffering, true
	case b[0] != '`':
		return stateStreaming, true
	}
	// A fence: wait for its language to tell whether it may hold a call.
	for i := 1; i < 3; i++ {
		if i == len(b) {
			return stateBuffering, false
		}
		if b[i] != '`' {
			return stateStreaming, true
		}
	}
	end := 3
	for end < len(b) && end < 3+maxLang && isIdent(b[end]) {
		end++
	}
	switch {
	case end == len(b):
		return stateBuffering, false
	case fenceLang(string(b[3:end])):
		return stateBuffering, true
	}
	return stateStreaming, true
}

// space is the whitespace around an answer that the forms ignore: ASCII
// only, so that the streaming decision never depends on a partial rune.
const space = " \t\r\n\v\f"

// maxLang bounds the fence language decide looks at ("tool_code" is 9).
const maxLang = 16

// fenceLang reports whether a code fence with this language may hold a call.
func fenceLang(lang string) bool {
	return lang == "" || strings.EqualFold(lang, "json") || strings.EqualFold(lang, "tool_code")
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// ParseToolCalls parses a whole answer per the prompt contract and returns its
// tool calls, or nil when the answer is text. Every call names an offered
// tool; arguments are compact JSON object text; ids are kept from the answer
// or minted as "call_" + 24 hex characters.
func ParseToolCalls(answer string, tools []chat.Tool, choice chat.ToolChoice) []chat.ToolCall {
	s := strings.Trim(answer, space)
	if strings.HasPrefix(s, "```") {
		if len(s) < 6 || !strings.HasSuffix(s, "```") {
			return nil
		}
		end := 3
		for end < len(s)-3 && isIdent(s[end]) {
			end++
		}
		lang := s[3:end]
		body := strings.Trim(s[end:len(s)-3], space)
		switch {
		case strings.EqualFold(lang, "tool_code"):
			return parsePyCalls(body, tools)
		case !fenceLang(lang):
			return nil
		}
		s = body
	}
	if !strings.HasPrefix(s, "{") {
		return nil
	}
	return parseJSONCalls(s, tools, choice)
}

// jsonCall is the union of the JSON call shapes the contract accepts.
type jsonCall struct {
	ID         string          `json:"id"`
	Name       string          `json:"name"`
	Tool       string          `json:"tool"`
	Arguments  json.RawMessage `json:"arguments"`
	Input      json.RawMessage `json:"input"`
	Parameters json.RawMessage `json:"parameters"`
	// Function is OpenAI's nesting, which models sometimes imitate.
	Function  *jsonCall  `json:"function"`
	ToolCalls []jsonCall `json:"tool_calls"`
}

func (c *jsonCall) name() string {
	if c.Function != nil {
		return cmp.Or(c.Name, c.Tool, c.Function.Name)
	}
	return cmp.Or(c.Name, c.Tool)
}

func (c *jsonCall) args() json.RawMessage {
	switch {
	case c.Arguments != nil:
		return c.Arguments
	case c.Input != nil:
		return c.Input
	case c.Parameters != nil:
		return c.Parameters
	case c.Function != nil:
		return c.Function.args()
	}
	return nil
}

// parseJSONCalls handles forms 1, 2 and 4 of the contract.
func parseJSONCalls(s string, tools []chat.Tool, choice chat.ToolChoice) []chat.ToolCall {
	var obj jsonCall
	err := json.Unmarshal([]byte(s), &obj)
	var typeErr *json.UnmarshalTypeError
	if err != nil && !errors.As(err, &typeErr) {
		return nil
	}
	if err == nil && len(obj.ToolCalls) > 0 {
		calls := make([]chat.ToolCall, 0, len(obj.ToolCalls))
		for i := range obj.ToolCalls {
			c, ok := toCall(&obj.ToolCalls[i], tools)
			if !ok {
				return nil
			}
			calls = append(calls, c)
		}
		return calls
	}
	if err == nil && obj.ToolCalls == nil {
		if c, ok := toCall(&obj, tools); ok {
			return []chat.ToolCall{c}
		}
	}
	// Form 4: a forced choice answered with the bare arguments object. An
	// object shaped like a call (arguments, input, function, tool_calls) is
	// not taken as arguments, but a "name" that is no tool may be one.
	forced := forcedTool(tools, choice)
	if forced == "" || obj.ToolCalls != nil || obj.Function != nil || obj.Arguments != nil || obj.Input != nil {
		return nil
	}
	args, ok := NormalizeArgs(json.RawMessage(s))
	if !ok {
		return nil
	}
	return []chat.ToolCall{{ID: NewCallID(), Name: forced, Arguments: args}}
}

// toCall validates one JSON call against the offered tools.
func toCall(c *jsonCall, tools []chat.Tool) (chat.ToolCall, bool) {
	name := c.name()
	if findTool(tools, name) < 0 {
		return chat.ToolCall{}, false
	}
	args, ok := NormalizeArgs(c.args())
	if !ok {
		return chat.ToolCall{}, false
	}
	id := c.ID
	if id == "" && c.Function != nil {
		id = c.Function.ID
	}
	if id == "" {
		id = NewCallID()
	}
	return chat.ToolCall{ID: id, Name: name, Arguments: args}, true
}

// NormalizeArgs turns tool-call arguments (an object, a JSON string holding one,
// or nothing) into compact JSON object text.
func NormalizeArgs(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "{}", true
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		raw = bytes.TrimSpace([]byte(s))
		if len(raw) == 0 {
			return "{}", true
		}
	}
	if raw[0] != '{' {
		return "", false
	}
	var buf bytes.Buffer
	buf.Grow(len(raw))
	if json.Compact(&buf, raw) != nil {
		return "", false
	}
	return buf.String(), true
}

// forcedTool is the tool a forced choice names: the named one, or the only
// tool for "required"; "" when the choice forces no single tool.
func forcedTool(tools []chat.Tool, choice chat.ToolChoice) string {
	switch choice.Mode {
	case chat.ToolNamed:
		if findTool(tools, choice.Name) >= 0 {
			return choice.Name
		}
	case chat.ToolRequired:
		if len(tools) == 1 {
			return tools[0].Name
		}
	}
	return ""
}

func findTool(tools []chat.Tool, name string) int {
	if name == "" {
		return -1
	}
	for i := range tools {
		if tools[i].Name == name {
			return i
		}
	}
	return -1
}

// NewCallID mints a tool call id: "call_" + 24 random hex characters.
func NewCallID() string {
	var r [12]byte
	_, _ = rand.Read(r[:]) // crypto/rand.Read never fails (Go 1.24+).
	return "call_" + hex.EncodeToString(r[:])
}
