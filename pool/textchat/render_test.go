package textchat

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/jsonx"
)

var weather = chat.Tool{
	Name:        "get_weather",
	Description: "Weather for a city",
	Parameters:  json.RawMessage(`{"type": "object",` + "\n" + `"properties": {"city": {"type": "string"}}, "required": ["city"]}`),
}

func TestRender(t *testing.T) {
	const toolsLine = `{"tool_choice":"auto","tools":[{"name":"get_weather","description":"Weather for a city",` +
		`"parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]}`
	tests := []struct {
		name string
		give chat.Turn
		want string
	}{
		{
			name: "lone user message is bare",
			give: chat.Turn{Messages: []chat.Message{{Role: chat.RoleUser, Content: "hi <<<there>>>"}}},
			want: "hi <<<there>>>",
		},
		{
			name: "tool choice none is bare",
			give: chat.Turn{
				Messages:   []chat.Message{{Role: chat.RoleUser, Content: "hi"}},
				Tools:      []chat.Tool{weather},
				ToolChoice: chat.ToolChoice{Mode: chat.ToolNone},
			},
			want: "hi",
		},
		{
			name: "leading systems joined, a later one in place",
			give: chat.Turn{Messages: []chat.Message{
				{Role: chat.RoleSystem, Content: "A"},
				{Role: chat.RoleSystem, Content: "A2"},
				{Role: chat.RoleUser, Content: "q"},
				{Role: chat.RoleSystem, Content: "B"},
			}},
			want: "<<<system>>>\nA\n\nA2\n<<<user>>>\nq\n<<<system>>>\nB",
		},
		{
			name: "a continuation that starts with a system message keeps the tools after it",
			give: chat.Turn{SessionID: "s", Tools: []chat.Tool{{Name: "f"}}, Messages: []chat.Message{
				{Role: chat.RoleSystem, Content: "env"},
				{Role: chat.RoleUser, Content: "q"},
			}},
			want: "<<<system>>>\nenv\n<<<tools>>>\n{\"tool_choice\":\"auto\",\"tools\":[{\"name\":\"f\"}]}\n<<<contract>>>\n" + contractAuto + "\n<<<user>>>\nq",
		},
		{
			name: "a JSON answer asked of a lone question is not bare, and names its schema",
			give: chat.Turn{Messages: []chat.Message{{Role: chat.RoleUser, Content: "score it"}},
				Format: chat.Format{JSON: true, Schema: json.RawMessage(`{"type": "object",` + "\n" + `"properties": {"n": {"type": "integer"}}}`)}},
			want: "<<<format>>>\n" + formatJSON + "\nThe value must follow this JSON Schema:\n" +
				`{"type":"object","properties":{"n":{"type":"integer"}}}` + "\n<<<user>>>\nscore it",
		},
		{
			name: "a JSON answer without a schema, after the system and tools sections",
			give: chat.Turn{Tools: []chat.Tool{{Name: "f"}}, Format: chat.Format{JSON: true}, Messages: []chat.Message{
				{Role: chat.RoleSystem, Content: "env"},
				{Role: chat.RoleUser, Content: "q"},
			}},
			want: "<<<system>>>\nenv\n<<<tools>>>\n{\"tool_choice\":\"auto\",\"tools\":[{\"name\":\"f\"}]}\n<<<contract>>>\n" + contractAuto +
				"\n<<<format>>>\n" + formatJSON + "\n<<<user>>>\nq",
		},
		{
			name: "escaping",
			give: chat.Turn{Messages: []chat.Message{
				{Role: chat.RoleUser, Content: "<<<user>>>\nx <<<y\n<<<z"},
				{Role: chat.RoleAssistant, Content: ""},
			}},
			want: "<<<user>>>\n <<<user>>>\nx <<<y\n <<<z\n<<<assistant>>>\n",
		},
		{
			name: "full transcript with tools",
			give: chat.Turn{
				Messages: []chat.Message{
					{Role: chat.RoleSystem, Content: "You are a helpful assistant."},
					{Role: chat.RoleUser, Content: "What is the weather in Paris?"},
					{Role: chat.RoleAssistant, Content: "Let me check.", ToolCalls: []chat.ToolCall{
						{ID: "call_abc", Name: "get_weather", Arguments: `{"city":"Paris"}`},
					}},
					{Role: chat.RoleTool, ToolCallID: "call_abc", Content: "18C and sunny"},
					{Role: chat.RoleUser, Content: "Thanks!"},
				},
				Tools: []chat.Tool{weather},
			},
			want: "<<<system>>>\nYou are a helpful assistant.\n<<<tools>>>\n" + toolsLine +
				"\n<<<contract>>>\n" + contractAuto +
				"\n<<<user>>>\nWhat is the weather in Paris?\n<<<assistant>>>\nLet me check.\n" +
				"<<<tool_call id=call_abc name=get_weather>>>\n{\"city\":\"Paris\"}\n" +
				"<<<tool_result id=call_abc name=get_weather>>>\n18C and sunny\n<<<user>>>\nThanks!",
		},
		{
			name: "continuation: tool result only, tools repeated, odd ids sanitized",
			give: chat.Turn{
				SessionID: "sess-1",
				Messages: []chat.Message{
					{Role: chat.RoleTool, ToolCallID: "id with>space", Name: "get_weather", Content: "ok"},
				},
				Tools:      []chat.Tool{{Name: "get_weather"}},
				ToolChoice: chat.ToolChoice{Mode: chat.ToolNamed, Name: "get_weather"},
			},
			want: "<<<tools>>>\n{\"tool_choice\":\"get_weather\",\"tools\":[{\"name\":\"get_weather\"}]}\n<<<contract>>>\n" +
				contractText(chat.ToolChoice{Mode: chat.ToolNamed, Name: "get_weather"}) +
				"\n<<<tool_result id=id_with_space name=get_weather>>>\nok",
		},
		{
			name: "call without arguments and no text",
			give: chat.Turn{Messages: []chat.Message{
				{Role: chat.RoleUser, Content: "go"},
				{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: "c1", Name: "now"}}},
			}},
			want: "<<<user>>>\ngo\n<<<tool_call id=c1 name=now>>>\n{}",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Render(&tt.give); got != tt.want {
				t.Errorf("Render() =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestRenderContract(t *testing.T) {
	tests := []struct {
		give chat.ToolChoice
		want string
	}{
		{give: chat.ToolChoice{}, want: "only when it helps"},
		{give: chat.ToolChoice{Mode: chat.ToolRequired}, want: "must call at least one tool"},
		{give: chat.ToolChoice{Mode: chat.ToolNamed, Name: "get_weather"}, want: `must call the tool "get_weather"`},
	}
	for _, tt := range tests {
		got := contractText(tt.give)
		if !strings.Contains(got, tt.want) || !strings.Contains(got, "```json") {
			t.Errorf("contractText(%v) = %q, want it to contain %q", tt.give, got, tt.want)
		}
	}
}

func TestAppendJSONString(t *testing.T) {
	tests := []string{"", "plain", "q\"b\\s", "nl\n\r\t\x01", "é😀", "bad\xffutf8", "<&>"}
	for _, give := range tests {
		got := jsonx.AppendString(nil, give)
		var back string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Errorf("jsonx.AppendString(%q) = %s: %v", give, got, err)
			continue
		}
		want := strings.ToValidUTF8(give, "\uFFFD")
		if back != want {
			t.Errorf("round trip of %q = %q, want %q", give, back, want)
		}
	}
}
