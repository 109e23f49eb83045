// Package textchat adapts the neutral chat model (internal/chat) to
// text-only workers, whose chat mode takes one prompt and answers with
// text. It implements both directions of
// docs/prompt-contract.md: Render turns a Turn into one prompt (markers,
// tools and contract sections), and Parser turns the answer's text deltas
// back into neutral events, recognising tool calls.
//
// The package is neutral: it knows the prompt contract, not any worker's wire
// format. Text-only drivers call it; cmd/simworker reads the same contract.
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
	var w writer
	w.Grow(estimate(t, tools))

	// The system messages that open the transcript make the one system
	// section at the top; one that comes later (an agent's environment or
	// reminder mid-conversation) keeps its place, where the model reads it.
	lead := 0
	for lead < len(t.Messages) && t.Messages[lead].Role == chat.RoleSystem {
		if lead == 0 {
			w.marker(chat.RoleSystem, "", "")
		} else {
			w.WriteString("\n\n")
		}
		w.body(t.Messages[lead].Content)
		lead++
	}
	if tools {
		w.marker(sectionTools, "", "")
		_, _ = w.Write(appendToolsJSON(make([]byte, 0, toolsEstimate(t.Tools)), t.Tools, t.ToolChoice))
		w.marker(sectionContract, "", "")
		w.WriteString(contractText(t.ToolChoice))
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
	return w.String() // the builder's bytes: the prompt is made once, not copied
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
		n += len(contractAuto) + toolsEstimate(t.Tools)
	}
	return n
}

// toolsEstimate sizes the tools section's JSON.
func toolsEstimate(tools []chat.Tool) int {
	n := 128
	for _, tl := range tools {
		n += len(tl.Name) + len(tl.Description) + len(tl.Parameters) + 48
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

// writer builds a prompt in a strings.Builder sized up front (estimate), so
// a large transcript's prompt costs one allocation of its size.
type writer struct{ strings.Builder }

// marker starts a section: a newline ends the previous body, then the marker
// line. id and name become key=value attributes when set.
func (w *writer) marker(role, id, name string) {
	if w.Len() > 0 {
		w.WriteByte('\n')
	}
	w.WriteString("<<<")
	w.WriteString(role)
	if id != "" {
		w.WriteString(" id=")
		w.attr(id)
	}
	if name != "" {
		w.WriteString(" name=")
		w.attr(name)
	}
	w.WriteString(">>>\n")
}

// attr writes an attribute value; characters that would end the value or
// the marker line become '_' (ids and names are identifiers in practice).
func (w *writer) attr(v string) {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case ' ', '\t', '\r', '\n', '>', '=':
			w.WriteByte('_')
		default:
			w.WriteByte(c)
		}
	}
}

// body writes a section body, escaping lines that start with "<<<" by one
// leading space so they cannot be read as markers.
func (w *writer) body(s string) {
	if !strings.Contains(s, "<<<") {
		w.WriteString(s)
		return
	}
	for {
		if strings.HasPrefix(s, "<<<") {
			w.WriteByte(' ')
		}
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			w.WriteString(s)
			return
		}
		w.WriteString(s[:i+1])
		s = s[i+1:]
	}
}

// appendToolsJSON appends the tools section body: one line of JSON.
func appendToolsJSON(b []byte, tools []chat.Tool, choice chat.ToolChoice) []byte {
	b = append(b, `{"tool_choice":`...)
	switch choice.Mode {
	case chat.ToolRequired:
		b = append(b, `"required"`...)
	case chat.ToolNamed:
		b = jsonx.AppendString(b, choice.Name)
	default:
		b = append(b, `"auto"`...)
	}
	b = append(b, `,"tools":[`...)
	for i, tl := range tools {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = jsonx.AppendString(b, tl.Name)
		if tl.Description != "" {
			b = append(b, `,"description":`...)
			b = jsonx.AppendString(b, tl.Description)
		}
		b = appendSchema(b, tl.Parameters)
		b = append(b, '}')
	}
	return append(b, "]}"...)
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
	w.WriteString(formatJSON)
	s := bytes.TrimSpace(schema)
	if len(s) == 0 || bytes.Equal(s, []byte("null")) {
		return
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, s); err != nil {
		return
	}
	w.WriteString("\nThe value must follow this JSON Schema:\n")
	w.Write(compact.Bytes())
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
