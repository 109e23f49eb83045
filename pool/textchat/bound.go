package textchat

import (
	"strings"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/jsonx"
)

// JSONBound is an upper bound of the length of t's prompt (RenderNative's
// when native, else Render's) once written as a JSON string by
// jsonx.AppendString (encoding/json writes no more), quotes included. It is
// found without rendering: a driver tells from it, at the cost of one scan
// of the text, whether a turn fits its worker before it builds anything.
// Every byte of the text counts as it is escaped, so invalid UTF-8 (3 bytes
// of U+FFFD once decoded, 6 once escaped if it reaches here raw) and
// control characters cost what they really cost. TestJSONBound holds it to
// the real prompts.
func JSONBound(t *chat.Turn, native bool) int {
	tools := !native && toolsOffered(t.Tools, t.ToolChoice)
	if !tools && !t.Format.JSON && len(t.Messages) == 1 && t.Messages[0].Role == chat.RoleUser {
		return jsonx.StringLen(t.Messages[0].Content)
	}
	n := 2
	var names map[string]string // call id -> tool name, as render finds them
	for i := range t.Messages {
		m := &t.Messages[i]
		name := m.Name
		if m.Role == chat.RoleTool && name == "" && m.ToolCallID != "" {
			if names == nil {
				names = callNames(t.Messages)
			}
			name = names[m.ToolCallID] // a result without a name is named after its call
		}
		n += markerBound(m.Role, m.ToolCallID, name) + bodyBound(m.Content)
		for _, c := range m.ToolCalls {
			n += markerBound(sectionToolCall, c.ID, c.Name) + bodyBound(c.Arguments) + len("{}")
		}
	}
	if tools {
		// The tools section is JSON inside the prompt, so its strings are
		// escaped twice: each escaped byte at most doubles.
		n += 2*markerBound(sectionTools, "", "") + len(`{"tool_choice":,"tools":[]}`) + 2*jsonx.StringLen(t.ToolChoice.Name)
		for _, tl := range t.Tools {
			n += len(`{"name":,"description":,"parameters":},`) + 2*jsonx.StringLen(tl.Name) +
				2*jsonx.StringLen(tl.Description) + 2*jsonx.StringLen(string(tl.Parameters))
		}
		n += jsonx.StringLen(contractText(t.ToolChoice))
	}
	if t.Format.JSON {
		// The format section: its marker, the instruction and the schema
		// compacted (never longer than as sent), escaped once.
		n += markerBound(sectionFormat, "", "") + len(formatJSON) + len(`\nThe value must follow this JSON Schema:\n`) +
			jsonx.StringLen(string(t.Format.Schema))
	}
	return n
}

// markerBound bounds one escaped marker line, the newline before it and
// a system message's "\n\n" separator included: attributes are never longer
// than their value escaped.
func markerBound(role, id, name string) int {
	return len(`\n\n<<< id= name=>>>\n`) + jsonx.StringLen(role) + jsonx.StringLen(id) + jsonx.StringLen(name)
}

// bodyBound bounds one escaped section body: the text, and the space that
// keeps each line starting with "<<<" from reading as a marker.
func bodyBound(s string) int {
	return jsonx.StringLen(s) + strings.Count(s, "\n<<<") + 1
}
