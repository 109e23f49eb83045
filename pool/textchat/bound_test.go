package textchat

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/jsonx"
)

// FuzzJSONBound holds JSONBound to the prompts Render and RenderNative
// really make: never below their escaped length (a driver would send a
// turn its worker refuses), and close above it (it would refuse turns
// that fit).
func FuzzJSONBound(f *testing.F) {
	for _, s := range []string{"plain", "a\xff\xfe b", "\x00\x1f\"\\\n\t", "<<<user>>>\n<<<x\n<<<", "\u2028 é 日本", strings.Repeat("\xff", 300)} {
		f.Add(s, uint8(0))
		f.Add(s, uint8(1))
		f.Add(s, uint8(2))
	}
	f.Fuzz(func(t *testing.T, s string, shape uint8) {
		for _, tt := range turnsOf(s, shape) {
			for _, native := range []bool{false, true} {
				prompt := Render(tt)
				if native {
					prompt = RenderNative(tt)
				}
				got, bound := len(jsonx.AppendString(nil, prompt)), JSONBound(tt, native)
				if got > bound {
					t.Fatalf("native %v: prompt of %d escaped bytes, over its bound %d (turn %+v)", native, got, bound, tt)
				}
				// The text counts once, as escaped: only the markers and the
				// (small, escaped twice) tools section leave slack.
				if slack := 64 * (len(tt.Messages) + 2); len(tt.Tools) == 0 && bound > got+slack+len(s) {
					t.Fatalf("native %v: prompt of %d escaped bytes, bound %d is loose (turn %+v)", native, got, bound, tt)
				}
			}
		}
	})
}

// turnsOf makes turns that carry s in every place a prompt copies text
// from: a lone message, a transcript with tool calls and results, and
// offered tools (shape chooses the tool choice).
func turnsOf(s string, shape uint8) []*chat.Turn {
	choice := chat.ToolChoice{}
	switch shape % 3 {
	case 1:
		choice.Mode = chat.ToolRequired
	case 2:
		choice = chat.ToolChoice{Mode: chat.ToolNamed, Name: s}
	}
	params, _ := json.Marshal(map[string]string{"type": "object", "description": s})
	transcript := []chat.Message{
		{Role: chat.RoleSystem, Content: s}, {Role: chat.RoleSystem, Content: s},
		{Role: chat.RoleUser, Content: s},
		{Role: chat.RoleAssistant, Content: s, ToolCalls: []chat.ToolCall{{ID: s, Name: s, Arguments: s}, {ID: "c2", Name: "f"}}},
		{Role: chat.RoleTool, ToolCallID: s, Content: s},
		{Role: chat.RoleTool, ToolCallID: "c2", Name: s, Content: s},
	}
	return []*chat.Turn{
		{Messages: []chat.Message{{Role: chat.RoleUser, Content: s}}},
		{Messages: transcript},
		{Messages: transcript, Tools: []chat.Tool{{Name: s, Description: s, Parameters: params}, {Name: "f"}}, ToolChoice: choice},
	}
}
