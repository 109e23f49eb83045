package textchat

import (
	"strings"
	"testing"

	"github.com/poolgate/poolgate/internal/chat"
)

func benchTurn() *chat.Turn {
	return &chat.Turn{
		Messages: []chat.Message{
			{Role: chat.RoleSystem, Content: "You are a helpful assistant."},
			{Role: chat.RoleUser, Content: strings.Repeat("What is the weather in Paris? ", 20)},
			{Role: chat.RoleAssistant, Content: "Let me check.", ToolCalls: []chat.ToolCall{
				{ID: "call_abc", Name: "get_weather", Arguments: `{"city":"Paris"}`},
			}},
			{Role: chat.RoleTool, ToolCallID: "call_abc", Content: "18C and sunny"},
			{Role: chat.RoleUser, Content: "Thanks! <<<not a marker>>>"},
		},
		Tools: tools,
	}
}

func BenchmarkRender(b *testing.B) {
	t := benchTurn()
	b.ReportAllocs()
	for b.Loop() {
		_ = Render(t)
	}
}

func BenchmarkParserText(b *testing.B) {
	t := &chat.Turn{}
	words := strings.Fields(strings.Repeat("the quick brown fox jumps over the lazy dog ", 10))
	b.ReportAllocs()
	for b.Loop() {
		p := NewParser(t)
		for _, w := range words {
			_ = p.Text(w)
		}
		_, _ = p.Finish()
	}
}

func BenchmarkParserToolCall(b *testing.B) {
	t := &chat.Turn{Tools: tools}
	answer := "```json\n{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]}\n```"
	pieces := strings.SplitAfter(answer, " ")
	b.ReportAllocs()
	for b.Loop() {
		p := NewParser(t)
		for _, s := range pieces {
			_ = p.Text(s)
		}
		_, _ = p.Finish()
	}
}

func BenchmarkParserToolCode(b *testing.B) {
	t := &chat.Turn{Tools: tools}
	answer := "```tool_code\nsearch(query='weather in Paris', n=3)\n```"
	b.ReportAllocs()
	for b.Loop() {
		p := NewParser(t)
		_ = p.Text(answer)
		_, _ = p.Finish()
	}
}
