package textchat

import (
	"strings"
	"testing"

	"github.com/poolgate/poolgate/pool"
)

func benchTurn() *pool.Turn {
	return &pool.Turn{
		Messages: []pool.Message{
			{Role: pool.RoleSystem, Content: "You are a helpful assistant."},
			{Role: pool.RoleUser, Content: strings.Repeat("What is the weather in Paris? ", 20)},
			{Role: pool.RoleAssistant, Content: "Let me check.", ToolCalls: []pool.ToolCall{
				{ID: "call_abc", Name: "get_weather", Arguments: `{"city":"Paris"}`},
			}},
			{Role: pool.RoleTool, ToolCallID: "call_abc", Content: "18C and sunny"},
			{Role: pool.RoleUser, Content: "Thanks! <<<not a marker>>>"},
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
	t := &pool.Turn{}
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
	t := &pool.Turn{Tools: tools}
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
	t := &pool.Turn{Tools: tools}
	answer := "```tool_code\nsearch(query='weather in Paris', n=3)\n```"
	b.ReportAllocs()
	for b.Loop() {
		p := NewParser(t)
		_ = p.Text(answer)
		_, _ = p.Finish()
	}
}
