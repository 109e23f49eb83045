package chat

import (
	"errors"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	user := []Message{{Role: RoleUser, Content: "hi"}}
	tools := []Tool{{Name: "f"}, {Name: "g"}}
	half, over := 0.5, 1.5
	negK := -1
	tests := []struct {
		name string
		give Request
		// wantPath is the neutral path at fault; "" means valid.
		wantPath    string
		wantProblem ValidationProblem
	}{
		{name: "minimal", give: Request{Messages: user}},
		{name: "auto without tools", give: Request{Messages: user, ToolChoice: ToolChoice{Mode: ToolAuto}}},
		{name: "none without tools", give: Request{Messages: user, ToolChoice: ToolChoice{Mode: ToolNone}}},
		{name: "required with tools", give: Request{Messages: user, Tools: tools, ToolChoice: ToolChoice{Mode: ToolRequired}}},
		{name: "named offered tool", give: Request{Messages: user, Tools: tools, ToolChoice: ToolChoice{Mode: ToolNamed, Name: "g"}}},
		{name: "tool history", give: Request{Messages: []Message{
			{Role: RoleSystem, Content: "s"}, {Role: RoleUser, Content: "u"},
			{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "1", Name: "f", Arguments: "{}"}}},
			{Role: RoleTool, ToolCallID: "1", Content: "r"}}}},
		{name: "stops at the bounds", give: Request{Messages: user, Stop: append(make([]string, MaxStops-1), strings.Repeat("x", MaxStopBytes))}},
		{name: "top_p in range", give: Request{Messages: user, TopP: &half}},

		{name: "no messages", give: Request{}, wantPath: "messages"},
		{name: "too many messages", give: Request{Messages: make([]Message, MaxMessages+1)}, wantPath: "messages"},
		{name: "unknown role", give: Request{Messages: []Message{{Role: "wizard"}}}, wantPath: "messages[0].role"},
		{name: "tool result without call id", give: Request{Messages: []Message{{Role: RoleUser}, {Role: RoleTool, Content: "r"}}},
			wantPath: "messages[1].tool_call_id", wantProblem: Missing},
		{name: "tool calls on a user message", give: Request{Messages: []Message{{Role: RoleUser, ToolCalls: []ToolCall{{Name: "f"}}}}},
			wantPath: "messages[0].tool_calls"},
		{name: "tool call without name", give: Request{Messages: []Message{{Role: RoleUser}, {Role: RoleAssistant, ToolCalls: []ToolCall{{Name: "f"}, {ID: "x"}}}}},
			wantPath: "messages[1].tool_calls[1].name", wantProblem: Missing},
		{name: "too many tools", give: Request{Messages: user, Tools: make([]Tool, MaxTools+1)}, wantPath: "tools"},
		{name: "unnamed tool", give: Request{Messages: user, Tools: []Tool{{Name: "f"}, {}}}, wantPath: "tools[1].name", wantProblem: Missing},
		{name: "duplicate tool", give: Request{Messages: user, Tools: []Tool{{Name: "f"}, {Name: "g"}, {Name: "f"}}}, wantPath: "tools[2].name"},
		{name: "required without tools", give: Request{Messages: user, ToolChoice: ToolChoice{Mode: ToolRequired}}, wantPath: "tool_choice"},
		{name: "named without tools", give: Request{Messages: user, ToolChoice: ToolChoice{Mode: ToolNamed, Name: "f"}}, wantPath: "tool_choice"},
		{name: "named tool not offered", give: Request{Messages: user, Tools: tools, ToolChoice: ToolChoice{Mode: ToolNamed, Name: "h"}}, wantPath: "tool_choice"},
		{name: "unknown tool choice", give: Request{Messages: user, ToolChoice: ToolChoice{Mode: "sometimes"}}, wantPath: "tool_choice"},
		{name: "too many stops", give: Request{Messages: user, Stop: make([]string, MaxStops+1)}, wantPath: "stop"},
		{name: "long stop", give: Request{Messages: user, Stop: []string{"a", strings.Repeat("x", MaxStopBytes+1)}}, wantPath: "stop[1]"},
		{name: "top_p over 1", give: Request{Messages: user, TopP: &over}, wantPath: "top_p"},
		{name: "negative top_k", give: Request{Messages: user, TopK: &negK}, wantPath: "top_k"},
		{name: "negative max_tokens", give: Request{Messages: user, MaxTokens: -1}, wantPath: "max_tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.give.Validate()
			if tt.wantPath == "" {
				if err != nil {
					t.Fatalf("got %v, want valid", err)
				}
				return
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("got %v, want a *ValidationError at %s", err, tt.wantPath)
			}
			if ve.Path() != tt.wantPath || ve.Problem != tt.wantProblem || !strings.HasPrefix(ve.Error(), tt.wantPath+": ") {
				t.Errorf("got %s (problem %d), want %s (problem %d)", ve.Error(), ve.Problem, tt.wantPath, tt.wantProblem)
			}
		})
	}
}

func TestPromptTokens(t *testing.T) {
	words := func(s string) int { return len(strings.Fields(s)) }
	msgs := []Message{{Role: RoleSystem, Content: "be brief"}, {Role: RoleUser, Content: "one two three"},
		{Role: RoleAssistant, ToolCalls: []ToolCall{{Name: "f", Arguments: `{"a":1}`}}}}
	if got, want := PromptTokens(msgs, words), (2+4)+(3+4)+(0+4); got != want {
		t.Errorf("got %d, want %d (each message's text and 4 tokens of framing)", got, want)
	}
}
