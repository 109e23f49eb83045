package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// toolDef is one offered tool, as in the prompt's tools section.
type toolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// toolSpec is the body of a tools section; Choice is "auto", "required",
// "none" or a tool name.
type toolSpec struct {
	Choice string    `json:"tool_choice"`
	Tools  []toolDef `json:"tools"`
}

// promptTools returns the tools offered by secs, or nil.
func promptTools(secs []section) *toolSpec {
	for _, s := range secs {
		if s.role != roleTools {
			continue
		}
		var ts toolSpec
		if json.Unmarshal([]byte(strings.TrimSpace(s.body)), &ts) == nil && len(ts.Tools) > 0 && ts.Choice != "none" {
			return &ts
		}
	}
	return nil
}

// toolCall is the call the simulator decides to make; args keys are sorted
// wherever they are rendered, so answers are deterministic.
type toolCall struct {
	name string
	args map[string]any
	// single is set when the schema has exactly one property (tool_code then
	// uses the positional form).
	single bool
}

// plan is an answer before rendering: text, or tool calls.
type plan struct {
	text  string
	calls []*toolCall
}

// planAnswer decides the answer to a prompt (docs/prompt-contract.md, "What
// the simulator does with it"). tools may come from an earlier turn; calls
// are the ones the prompt's directives ask for. A prompt with a format
// section is answered with a JSON value built from its schema, unless it
// makes tool calls.
func planAnswer(secs []section, tools *toolSpec, calls []directedCall) plan {
	p := planFree(secs, tools, calls)
	if schema, ok := promptFormat(secs); ok && len(p.calls) == 0 {
		user := ""
		if i := lastUser(secs); i >= 0 {
			user = stripDirectives(secs[i].body)
		}
		p.text = marshalPlain(sampleJSON(schema, user, 0))
	}
	return p
}

// promptFormat returns the schema of the prompt's format section (nil when
// it names none); ok is false when there is no format section.
func promptFormat(secs []section) (json.RawMessage, bool) {
	for _, s := range secs {
		if s.role != roleFormat {
			continue
		}
		body := strings.TrimSpace(s.body)
		last := body[strings.LastIndexByte(body, '\n')+1:]
		if strings.HasPrefix(last, "{") && json.Valid([]byte(last)) {
			return json.RawMessage(last), true
		}
		return nil, true
	}
	return nil, false
}

// sampleJSON builds a value that follows schema: an object gets each of its
// properties, strings the user's text (the first enum value when there is
// an enum), numbers 1, booleans true, arrays one item. Type names are read
// in any case (Gemini's schemas say OBJECT and STRING). No schema is an
// empty object.
func sampleJSON(schema json.RawMessage, user string, depth int) any {
	var s struct {
		Type       json.RawMessage            `json:"type"`
		Enum       []any                      `json:"enum"`
		Properties map[string]json.RawMessage `json:"properties"`
		Items      json.RawMessage            `json:"items"`
	}
	_ = json.Unmarshal(schema, &s) // a schema we cannot read is an empty object
	if len(s.Enum) > 0 {
		return s.Enum[0]
	}
	typ := strings.ToLower(schemaType(s.Type))
	if user == "" {
		user = "sim"
	}
	switch {
	case typ == "string":
		return user
	case typ == "number" || typ == "integer":
		return 1
	case typ == "boolean":
		return true
	case typ == "array" && depth < 8:
		return []any{sampleJSON(s.Items, user, depth+1)}
	case typ == "array":
		return []any{}
	}
	obj := make(map[string]any, len(s.Properties))
	if depth < 8 {
		for k, p := range s.Properties {
			obj[k] = sampleJSON(p, user, depth+1)
		}
	}
	return obj
}

// schemaType reads a schema's type: a name, or the first non-null name of
// a list.
func schemaType(raw json.RawMessage) string {
	var typ string
	if json.Unmarshal(raw, &typ) == nil {
		return typ
	}
	var types []string
	_ = json.Unmarshal(raw, &types)
	for _, t := range types {
		if t != "null" {
			return t
		}
	}
	return ""
}

// planFree decides the answer as free text or tool calls.
func planFree(secs []section, tools *toolSpec, calls []directedCall) plan {
	last := lastTurn(secs)
	if last >= 0 && secs[last].role == roleToolResult {
		return plan{text: quoteResults(secs[:last+1])}
	}
	user := ""
	if i := lastUser(secs); i >= 0 {
		user = stripDirectives(secs[i].body)
	}
	if tools == nil || last < 0 || secs[last].role != roleUser {
		return plan{text: "You said: " + user}
	}
	if cs := directedCalls(tools, calls, user); len(cs) > 0 {
		return plan{calls: cs}
	}
	if (tools.Choice == "auto" || tools.Choice == "") && len(tools.Tools) > 1 {
		// An agent offers a dozen tools with every prompt; a model picks one
		// only when the task needs it.
		return plan{text: "You said: " + user}
	}
	return plan{calls: []*toolCall{chooseCall(tools, user)}}
}

// directedCalls returns the directed calls whose tools are offered.
func directedCalls(ts *toolSpec, calls []directedCall, user string) []*toolCall {
	var out []*toolCall
	for _, c := range calls {
		for _, def := range ts.Tools {
			if def.Name != c.name {
				continue
			}
			args, n := c.args, 0
			if args == nil {
				args, n = argsFromSchema(def.Parameters, user)
			}
			out = append(out, &toolCall{name: def.Name, args: args, single: n == 1})
			break
		}
	}
	return out
}

// quoteResults quotes the trailing tool results, one line each.
func quoteResults(secs []section) string {
	start := len(secs)
	for start > 0 && secs[start-1].role == roleToolResult {
		start--
	}
	calls := map[string]string{} // call id -> tool name
	for _, s := range secs[:start] {
		if s.role == roleToolCall && s.attrs["id"] != "" && s.attrs["name"] != "" {
			calls[s.attrs["id"]] = s.attrs["name"]
		}
	}
	lines := make([]string, 0, len(secs)-start)
	for _, s := range secs[start:] {
		lines = append(lines, fmt.Sprintf("Tool %s returned: %s", resultName(calls, s), strings.TrimSpace(s.body)))
	}
	return strings.Join(lines, "\n")
}

// resultName names a tool result: its own name attribute, else the name of
// the call with the same id, else "tool".
func resultName(calls map[string]string, r section) string {
	if n := r.attrs["name"]; n != "" {
		return n
	}
	if n := calls[r.attrs["id"]]; n != "" {
		return n
	}
	return "tool"
}

// chooseCall picks the named tool for a forced choice, else the first one,
// and builds its arguments from the schema.
func chooseCall(ts *toolSpec, user string) *toolCall {
	def := ts.Tools[0]
	for _, t := range ts.Tools {
		if t.Name == ts.Choice {
			def = t
		}
	}
	args, n := argsFromSchema(def.Parameters, user)
	return &toolCall{name: def.Name, args: args, single: n == 1}
}

// propSchema is the part of a JSON schema property the simulator reads.
type propSchema struct {
	Type json.RawMessage `json:"type"`
	Enum []any           `json:"enum"`
}

// argsFromSchema fills every property: strings get the user's text (first
// enum value when there is an enum), numbers 1, booleans true.
func argsFromSchema(params json.RawMessage, user string) (map[string]any, int) {
	var schema struct {
		Properties map[string]propSchema `json:"properties"`
	}
	_ = json.Unmarshal(params, &schema) // a schema we cannot read means no arguments
	if user == "" {
		user = "sim"
	}
	args := make(map[string]any, len(schema.Properties))
	for k, p := range schema.Properties {
		args[k] = sampleValue(p, user)
	}
	return args, len(schema.Properties)
}

func sampleValue(p propSchema, user string) any {
	if len(p.Enum) > 0 {
		return p.Enum[0]
	}
	typ := ""
	var types []string
	if json.Unmarshal(p.Type, &typ) != nil && json.Unmarshal(p.Type, &types) == nil {
		for _, t := range types {
			if t != "null" {
				typ = t
				break
			}
		}
	}
	switch typ {
	case "number", "integer":
		return 1
	case "boolean":
		return true
	case "array":
		return []any{}
	case "object":
		return map[string]any{}
	default:
		return user
	}
}

// marshalPlain is json.Marshal without HTML escaping (answers are not HTML).
func marshalPlain(v any) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // only maps, slices and scalars reach here
	return strings.TrimSuffix(b.String(), "\n")
}

// renderJSONCalls renders the contract's fenced JSON form.
func renderJSONCalls(calls []*toolCall) string {
	list := make([]any, 0, len(calls))
	for _, c := range calls {
		list = append(list, map[string]any{"name": c.name, "arguments": c.args})
	}
	return "```json\n" + marshalPlain(map[string]any{"tool_calls": list}) + "\n```"
}

// renderToolCode renders Lingma's tool_code form with Python literals; the
// form has room for one call.
func renderToolCode(c *toolCall) string {
	keys := sortedKeys(c.args)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		if c.single {
			parts = append(parts, pyLiteral(c.args[k]))
			continue
		}
		parts = append(parts, k+"="+pyLiteral(c.args[k]))
	}
	return "```tool_code\n" + c.name + "(" + strings.Join(parts, ", ") + ")\n```"
}

func pyLiteral(v any) string {
	switch v := v.(type) {
	case nil:
		return "None"
	case bool:
		if v {
			return "True"
		}
		return "False"
	case string:
		return marshalPlain(v)
	case int:
		return strconv.Itoa(v)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	case []any:
		items := make([]string, len(v))
		for i, x := range v {
			items[i] = pyLiteral(x)
		}
		return "[" + strings.Join(items, ", ") + "]"
	case map[string]any:
		items := make([]string, 0, len(v))
		for _, k := range sortedKeys(v) {
			items = append(items, marshalPlain(k)+": "+pyLiteral(v[k]))
		}
		return "{" + strings.Join(items, ", ") + "}"
	default:
		return marshalPlain(v)
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// filler pads answers to a word count.
var filler = strings.Fields("lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et dolore magna aliqua")

// padWords appends filler words until text has n words.
func padWords(text string, n int) string {
	have := len(strings.Fields(text))
	var b strings.Builder
	b.WriteString(text)
	for i := 0; have < n; i, have = i+1, have+1 {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(filler[i%len(filler)])
	}
	return b.String()
}

// wordPieces splits text into one piece per word, each keeping the blanks
// that follow it (and the first the blanks before it), so the pieces
// concatenate to text.
func wordPieces(text string) []string {
	var (
		out      []string
		start    int
		seenWord bool
		trailing bool
	)
	for i, r := range text {
		if unicode.IsSpace(r) {
			trailing = seenWord
			continue
		}
		if trailing {
			out = append(out, text[start:i])
			start, trailing = i, false
		}
		seenWord = true
	}
	if start < len(text) {
		out = append(out, text[start:])
	}
	return out
}

// splitChunks splits text into deltas: one per word when n < 0, else exactly
// n non-empty deltas, padding text with filler words when it has fewer than n.
// It returns the deltas and the (possibly padded) full text they make up.
func splitChunks(text string, n int) ([]string, string) {
	if n < 0 {
		return wordPieces(text), text
	}
	if n == 0 {
		return nil, ""
	}
	pieces := wordPieces(text)
	for len(pieces) < n {
		text = padWords(text, len(strings.Fields(text))+n-len(pieces))
		pieces = wordPieces(text)
	}
	out := make([]string, 0, n)
	base, extra := len(pieces)/n, len(pieces)%n
	for i := range n {
		size := base
		if i < extra {
			size++
		}
		out = append(out, strings.Join(pieces[:size], ""))
		pieces = pieces[size:]
	}
	return out, text
}

// whoamiText is the [[sim:whoami]] answer.
func whoamiText(sid string, turn int, reply bool, sections, chars int) string {
	return fmt.Sprintf("session=%s turn=%d reply=%t sections=%d chars=%d", sid, turn, reply, sections, chars)
}

// wordCount is the simulated server's own token count, one per word, for
// the usage it reports: a real server counts with its model's tokenizer and
// the gateway passes that number on, so this stands for the upstream's count,
// not for the gateway's estimate (internal/tokens).
func wordCount(s string) int { return len(strings.Fields(s)) }
