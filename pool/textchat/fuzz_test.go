package textchat

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/poolgate/poolgate/internal/chat"
)

// FuzzParseToolCalls checks that no answer makes the parser panic, and that
// every call it returns names an offered tool with a JSON object as
// arguments.
func FuzzParseToolCalls(f *testing.F) {
	seeds := []string{
		"```json\n{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]}\n```",
		`{"tool_calls":[{"function":{"name":"now","arguments":"{\"a\":1}"}}]}`,
		`{"name":"search","input":{"query":"x"}}`,
		`{"city":"Paris"}`,
		"```tool_code\nsearch(query='a\\x41' \"b\", n=[1,(2,),{'k':None}], m=-.5e-3)\n```",
		"```tool_code\nget_weather(\"Paris\")\n```",
		"```tool_code\nprint(default_api.now())\nnow()\n```",
		"```tool_code\nsearch(query=r'''\\d''', n=0x10)\n```",
		"```tool_code\nsearch(q=((((((((((1))))))))))\n```",
		"```tool_code\nsearch(q='\\U0010ffff\\777\\N{DASH}')\n```",
		"plain text",
		"```",
		"{",
	}
	for _, s := range seeds {
		f.Add(s, uint8(0))
		f.Add(s, uint8(2))
	}
	f.Fuzz(func(t *testing.T, answer string, mode uint8) {
		choice := chat.ToolChoice{}
		switch mode % 3 {
		case 1:
			choice.Mode = chat.ToolRequired
		case 2:
			choice = chat.ToolChoice{Mode: chat.ToolNamed, Name: "get_weather"}
		}
		calls := ParseToolCalls(answer, tools, choice)
		for _, c := range calls {
			if findTool(tools, c.Name) < 0 {
				t.Errorf("call of unoffered tool %q", c.Name)
			}
			var obj map[string]any
			if err := json.Unmarshal([]byte(c.Arguments), &obj); err != nil || obj == nil {
				t.Errorf("arguments %q are not a JSON object: %v", c.Arguments, err)
			}
		}
		// The streaming parser must agree with the whole-answer parser
		// however the answer is split.
		p := NewParser(&chat.Turn{Tools: tools, ToolChoice: choice})
		var text strings.Builder
		for _, piece := range strings.SplitAfter(answer, "`") {
			for _, e := range p.Text(piece) {
				text.WriteString(e.Text)
			}
		}
		events, reason := p.Finish()
		n := 0
		for _, e := range events {
			text.WriteString(e.Text)
			if e.Type == chat.EventToolCall {
				n++
			}
		}
		if n != len(calls) || (n > 0) != (reason == chat.FinishToolCalls) {
			t.Errorf("streamed parse: %d calls (%s), whole answer: %d", n, reason, len(calls))
		}
		if n == 0 && text.String() != answer {
			t.Errorf("text %q, want the answer %q", text.String(), answer)
		}
	})
}
