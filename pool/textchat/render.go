// Package textchat adapts the neutral chat model (internal/chat) to
// text-only workers such as Lingma's chat mode, which take one prompt and
// answer with text. It implements both directions of
// docs/prompt-contract.md: Render turns a Turn into one prompt (markers,
// tools and contract sections), and Parser turns the answer's text deltas
// back into neutral events, recognising tool calls.
//
// The package is neutral: it knows the prompt contract, not any worker's wire
// format. Drivers (pool/lingma) call it; cmd/simworker reads the same contract.
package textchat

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/jsonx"
)

// Section roles that are not message roles.
const (
	sectionTools      = "tools"
	sectionContract   = "contract"
	sectionToolCall   = "tool_call"
	sectionToolResult = "tool_result"
	sectionFormat     = "format"
)

// Render returns the prompt for t per the prompt contract. A lone user message
// with no system message and no offered tools is returned as its bare text.
// Continuation turns need no special case: t.Messages then holds only the new
// messages, and the tools sections are repeated whenever tools are offered.
func Render(t *chat.Turn) string { return render(t, toolsOffered(t.Tools, t.ToolChoice)) }

// RenderNative renders t for a worker that is given the tools natively (as
// structured data beside the prompt): the transcript only, without the tools
// and contract sections. Earlier calls and results keep their sections.
func RenderNative(t *chat.Turn) string { return render(t, false) }

func render(t *chat.Turn, tools bool) string {
	if !tools && !t.Format.JSON && len(t.Messages) == 1 && t.Messages[0].Role == chat.RoleUser {
		return t.Messages[0].Content
	}
	w := writer{b: make([]byte, 0, estimate(t, tools))}

	// The system messages that open the transcript make the one system
	// section at the top; one that comes later (an agent's environment or
	// reminder mid-conversation) keeps its place, where the model reads it.
	lead := 0
	for lead < len(t.Messages) && t.Messages[lead].Role == chat.RoleSystem {
		if lead == 0 {
			w.marker(chat.RoleSystem, "", "")
		} else {
			w.b = append(w.b, "\n\n"...)
		}
		w.body(t.Messages[lead].Content)
		lead++
	}
	if tools {
		w.marker(sectionTools, "", "")
		w.toolsJSON(t.Tools, t.ToolChoice)
		w.marker(sectionContract, "", "")
		w.b = append(w.b, contractText(t.ToolChoice)...)
	}
	if t.Format.JSON {
		// Like the tools, the format is said in every prompt, a
		// continuation's too.
		w.marker(sectionFormat, "", "")
		w.format(t.Format.Schema)
	}
	var names map[string]string // call id -> tool name, built on first need
	for i := lead; i < len(t.Messages); i++ {
		m := &t.Messages[i]
		switch m.Role {
		case chat.RoleAssistant:
			if m.Content != "" || len(m.ToolCalls) == 0 {
				w.marker(chat.RoleAssistant, "", "")
				w.body(m.Content)
			}
			for _, c := range m.ToolCalls {
				w.marker(sectionToolCall, c.ID, c.Name)
				args := c.Arguments
				if strings.TrimSpace(args) == "" {
					args = "{}"
				}
				w.body(args)
			}
		case chat.RoleTool:
			name := m.Name
			if name == "" && m.ToolCallID != "" {
				if names == nil {
					names = callNames(t.Messages)
				}
				name = names[m.ToolCallID]
			}
			w.marker(sectionToolResult, m.ToolCallID, name)
			w.body(m.Content)
		default:
			w.marker(m.Role, "", "")
			w.body(m.Content)
		}
	}
	return string(w.b)
}

// toolsOffered reports whether the prompt carries the tools sections and the
// answer must be parsed for tool calls.
func toolsOffered(tools []chat.Tool, choice chat.ToolChoice) bool {
	return len(tools) > 0 && choice.Mode != chat.ToolNone
}

// estimate sizes the prompt buffer so that Render allocates once in the
// common case.
func estimate(t *chat.Turn, tools bool) int {
	n := 64
	if t.Format.JSON {
		n += len(formatJSON) + len(t.Format.Schema) + 64
	}
	for i := range t.Messages {
		m := &t.Messages[i]
		n += len(m.Content) + 32
		for _, c := range m.ToolCalls {
			n += len(c.Arguments) + len(c.ID) + len(c.Name) + 40
		}
	}
	if tools {
		n += len(contractAuto) + 128
		for _, tl := range t.Tools {
			n += len(tl.Name) + len(tl.Description) + len(tl.Parameters) + 48
		}
	}
	return n
}

// callNames maps call ids to tool names, for tool results whose protocol did
// not carry the name. One map, not a search per result: a transcript may
// hold tens of thousands of calls.
func callNames(msgs []chat.Message) map[string]string {
	names := make(map[string]string)
	for i := range msgs {
		for _, c := range msgs[i].ToolCalls {
			if c.ID != "" {
				names[c.ID] = c.Name
			}
		}
	}
	return names
}

type writer struct{ b []byte }

// marker starts a section: a newline ends the previous body, then the marker
// line. id and name become key=value attributes when set.
func (w *writer) marker(role, id, name string) {
	if len(w.b) > 0 {
		w.b = append(w.b, '\n')
	}
	w.b = append(w.b, "<<<"...)
	w.b = append(w.b, role...)
	if id != "" {
		w.b = append(w.b, " id="...)
		w.b = appendAttr(w.b, id)
	}
	if name != "" {
		w.b = append(w.b, " name="...)
		w.b = appendAttr(w.b, name)
	}
	w.b = append(w.b, ">>>\n"...)
}

// appendAttr writes an attribute value; characters that would end the value
// or the marker line become '_' (ids and names are identifiers in practice).
func appendAttr(b []byte, v string) []byte {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case ' ', '\t', '\r', '\n', '>', '=':
			b = append(b, '_')
		default:
			b = append(b, c)
		}
	}
	return b
}

// body writes a section body, escaping lines that start with "<<<" by one
// leading space so they cannot be read as markers.
func (w *writer) body(s string) {
	if !strings.Contains(s, "<<<") {
		w.b = append(w.b, s...)
		return
	}
	for {
		if strings.HasPrefix(s, "<<<") {
			w.b = append(w.b, ' ')
		}
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			w.b = append(w.b, s...)
			return
		}
		w.b = append(w.b, s[:i+1]...)
		s = s[i+1:]
	}
}

// toolsJSON writes the tools section body: one line of JSON.
func (w *writer) toolsJSON(tools []chat.Tool, choice chat.ToolChoice) {
	w.b = append(w.b, `{"tool_choice":`...)
	switch choice.Mode {
	case chat.ToolRequired:
		w.b = append(w.b, `"required"`...)
	case chat.ToolNamed:
		w.b = jsonx.AppendString(w.b, choice.Name)
	default:
		w.b = append(w.b, `"auto"`...)
	}
	w.b = append(w.b, `,"tools":[`...)
	for i, tl := range tools {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		w.b = append(w.b, `{"name":`...)
		w.b = jsonx.AppendString(w.b, tl.Name)
		if tl.Description != "" {
			w.b = append(w.b, `,"description":`...)
			w.b = jsonx.AppendString(w.b, tl.Description)
		}
		w.b = appendSchema(w.b, tl.Parameters)
		w.b = append(w.b, '}')
	}
	w.b = append(w.b, "]}"...)
}

// appendSchema writes `,"parameters":<schema>` on one line; a missing or
// malformed schema is left out rather than breaking the section.
func appendSchema(b []byte, schema json.RawMessage) []byte {
	s := bytes.TrimSpace(schema)
	if len(s) == 0 || bytes.Equal(s, []byte("null")) {
		return b
	}
	n := len(b)
	b = append(b, `,"parameters":`...)
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, s); err != nil {
		return b[:n]
	}
	return buf.Bytes()
}

// formatJSON is what the format section tells the model.
const formatJSON = "Answer with one JSON value and nothing else: no prose, no code fence."

// format writes the format section's body: the instruction, then the
// schema on a line of its own when there is one.
func (w *writer) format(schema json.RawMessage) {
	w.b = append(w.b, formatJSON...)
	s := bytes.TrimSpace(schema)
	if len(s) == 0 || bytes.Equal(s, []byte("null")) {
		return
	}
	n := len(w.b)
	w.b = append(w.b, "\nThe value must follow this JSON Schema:\n"...)
	buf := bytes.NewBuffer(w.b)
	if err := json.Compact(buf, s); err != nil {
		w.b = w.b[:n]
		return
	}
	w.b = buf.Bytes()
}

const contractHead = "To call tools, answer with nothing but one fenced block like this one, listing one or more calls:\n" +
	"```json\n" +
	`{"tool_calls": [{"name": "TOOL_NAME", "arguments": {"ARGUMENT": "VALUE"}}]}` + "\n" +
	"```\n" +
	"Use only the tools in the tools section, with arguments that match their parameters schema.\n"

const contractTail = "Never invent tool results: they come back in tool_result sections after your calls."

const contractAuto = contractHead +
	"Call a tool only when it helps; otherwise answer in plain text, without any block.\n" + contractTail

const contractRequired = contractHead +
	"You must call at least one tool in this answer.\n" + contractTail

// contractText is the human-readable contract for the tool choice.
func contractText(choice chat.ToolChoice) string {
	switch choice.Mode {
	case chat.ToolRequired:
		return contractRequired
	case chat.ToolNamed:
		return contractHead + "You must call the tool " + string(jsonx.AppendString(nil, choice.Name)) +
			" in this answer.\n" + contractTail
	default:
		return contractAuto
	}
}
