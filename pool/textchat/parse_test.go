package textchat

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/poolgate/poolgate/internal/chat"
)

var (
	search = chat.Tool{Name: "search", Parameters: json.RawMessage(`{"type":"object","properties":{"query":{"type":"string"},"n":{"type":"integer"}}}`)}
	now    = chat.Tool{Name: "now"}
	tools  = []chat.Tool{weather, search, now}
	idRE   = regexp.MustCompile(`^call_[0-9a-f]{24}$`)
)

// call is a ToolCall without the id, which is random unless given.
type call struct{ name, args string }

func TestParseToolCalls(t *testing.T) {
	auto := chat.ToolChoice{}
	tests := []struct {
		name   string
		give   string
		tools  []chat.Tool
		choice chat.ToolChoice
		want   []call
	}{
		{name: "contract fenced", give: "```json\n{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]}\n```",
			want: []call{{"get_weather", `{"city":"Paris"}`}}},
		{name: "contract bare, two calls, string args", give: ` {"tool_calls":[{"name":"get_weather","arguments":"{\"city\": \"Rome\"}"},{"name":"now"}]} `,
			want: []call{{"get_weather", `{"city":"Rome"}`}, {"now", `{}`}}},
		{name: "contract openai nesting", give: `{"tool_calls":[{"id":"c9","type":"function","function":{"name":"now","arguments":"{}"}}]}`,
			want: []call{{"now", `{}`}}},
		{name: "contract one unknown tool makes it text", give: `{"tool_calls":[{"name":"now"},{"name":"rm_rf"}]}`},
		{name: "contract empty list is text", give: `{"tool_calls":[]}`},
		{name: "single object", give: `{"name":"search","arguments":{"query":"go", "n": 3}}`,
			want: []call{{"search", `{"query":"go","n":3}`}}},
		{name: "single object input", give: "```\n{\"tool\":\"search\",\"input\":{\"query\":\"x\"}}\n```",
			want: []call{{"search", `{"query":"x"}`}}},
		{name: "single object parameters", give: "```JSON\n{\"name\":\"search\",\"parameters\":{\"query\":\"x\"}}```",
			want: []call{{"search", `{"query":"x"}`}}},
		{name: "unknown name is text", give: `{"name":"nope","arguments":{}}`},
		{name: "args not an object is text", give: `{"name":"now","arguments":[1]}`},
		{name: "bad args string is text", give: `{"name":"now","arguments":"{oops"}`},
		{name: "plain text", give: "The weather is fine."},
		{name: "text around a block is text", give: "Sure:\n```json\n{\"name\":\"now\"}\n```"},
		{name: "broken json", give: `{"name":"now"`},
		{name: "other fence language", give: "```python\nnow()\n```"},
		{name: "tool_code keywords", give: "```tool_code\nsearch(query='it\\'s \"x\"', n=3)\n```",
			want: []call{{"search", `{"query":"it's \"x\"","n":3}`}}},
		{name: "tool_code literals", give: "```tool_code\nsearch(query=\"a\" 'b', n=-1.5e3, x=[1, (2, 3), ()], y={'k': None, 1: True, 'f': False}, z=(4),)\n```",
			want: []call{{"search", `{"query":"ab","n":-1.5e3,"x":[1,[2,3],[]],"y":{"k":null,"1":true,"f":false},"z":4}`}}},
		{name: "tool_code numbers", give: "```tool_code\nsearch(a=.5, b=5., c=1_000, d=+2, e=0)\n```",
			want: []call{{"search", `{"a":0.5,"b":5,"c":1000,"d":2,"e":0}`}}},
		{name: "tool_code escapes and raw", give: "```tool_code\nsearch(query=\"\\n\\t\\x41\\u00e9\\101\\q\", r=r'\\d+', t='''a'b''')\n```",
			want: []call{{"search", `{"query":"\n\tAéA\\q","r":"\\d+","t":"a'b"}`}}},
		{name: "tool_code positional single property", give: "```tool_code\nget_weather(\"Paris\")\n```",
			want: []call{{"get_weather", `{"city":"Paris"}`}}},
		{name: "tool_code positional with two properties is text", give: "```tool_code\nsearch(\"go\")\n```"},
		{name: "tool_code positional then keyword is text", give: "```tool_code\nget_weather(\"Paris\", city=\"x\")\n```"},
		{name: "tool_code no args", give: "```tool_code\nnow()\n```", want: []call{{"now", `{}`}}},
		{name: "tool_code print and dotted, two calls", give: "```tool_code\nprint(default_api.now())\nget_weather(city = 'Oslo')  # x\n```",
			want: []call{{"now", `{}`}, {"get_weather", `{"city":"Oslo"}`}}},
		{name: "tool_code variable is text", give: "```tool_code\nsearch(query=q)\n```"},
		{name: "tool_code duplicate keyword is text", give: "```tool_code\nsearch(n=1, n=2)\n```"},
		{name: "tool_code unknown tool is text", give: "```tool_code\nrm(path='/')\n```"},
		{name: "tool_code set is text", give: "```tool_code\nsearch(x={1, 2})\n```"},
		{name: "tool_code unterminated string", give: "```tool_code\nsearch(query='abc)\n```"},
		{name: "tool_code trailing junk", give: "```tool_code\nnow() + 1\n```"},
		{name: "forced named bare args", give: `{"city":"Paris"}`, choice: chat.ToolChoice{Mode: chat.ToolNamed, Name: "get_weather"},
			want: []call{{"get_weather", `{"city":"Paris"}`}}},
		{name: "forced named args with a name key", give: `{"name":"Bob"}`, choice: chat.ToolChoice{Mode: chat.ToolNamed, Name: "get_weather"},
			want: []call{{"get_weather", `{"name":"Bob"}`}}},
		{name: "required one tool bare args", give: "```json\n{\"city\": \"Paris\"}\n```", tools: []chat.Tool{weather},
			choice: chat.ToolChoice{Mode: chat.ToolRequired}, want: []call{{"get_weather", `{"city":"Paris"}`}}},
		{name: "required many tools bare args is text", give: `{"city":"Paris"}`, choice: chat.ToolChoice{Mode: chat.ToolRequired}},
		{name: "auto bare args is text", give: `{"city":"Paris"}`, choice: auto},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := tt.tools
			if ts == nil {
				ts = tools
			}
			got := ParseToolCalls(tt.give, ts, tt.choice)
			if len(got) != len(tt.want) {
				t.Fatalf("ParseToolCalls() = %+v, want %+v", got, tt.want)
			}
			for i, c := range got {
				if c.Name != tt.want[i].name || c.Arguments != tt.want[i].args || c.ID == "" {
					t.Errorf("call %d = %+v, want %+v", i, c, tt.want[i])
				}
			}
		})
	}
}

func TestParseToolCallsIDs(t *testing.T) {
	got := ParseToolCalls(`{"tool_calls":[{"id":"mine","name":"now"},{"name":"now"}]}`, tools, chat.ToolChoice{})
	if len(got) != 2 || got[0].ID != "mine" || !idRE.MatchString(got[1].ID) {
		t.Fatalf("ids = %+v, want mine and a minted call_ id", got)
	}
	if a, b := NewCallID(), NewCallID(); a == b || !idRE.MatchString(a) {
		t.Errorf("NewCallID() = %q, %q, want distinct call_+24 hex", a, b)
	}
}

// feed runs a parser over deltas and returns the events and finish reason.
func feed(t *testing.T, turn *chat.Turn, deltas ...string) (events []chat.Event, streamed int, reason chat.FinishReason) {
	t.Helper()
	p := NewParser(turn)
	for _, d := range deltas {
		evs := p.Text(d)
		streamed += len(evs)
		events = append(events, evs...)
	}
	evs, reason := p.Finish()
	return append(events, evs...), streamed, reason
}

func joinText(events []chat.Event) string {
	var b strings.Builder
	for _, e := range events {
		if e.Type == chat.EventText {
			b.WriteString(e.Text)
		}
	}
	return b.String()
}

func TestParser(t *testing.T) {
	withTools := &chat.Turn{Tools: tools}
	tests := []struct {
		name         string
		turn         *chat.Turn
		give         []string
		wantText     string
		wantCalls    int
		wantStreamed int
		wantReason   chat.FinishReason
	}{
		{name: "no tools streams", turn: &chat.Turn{}, give: []string{"a", "", "b"},
			wantText: "ab", wantStreamed: 2, wantReason: chat.FinishStop},
		{name: "tool choice none streams", turn: &chat.Turn{Tools: tools, ToolChoice: chat.ToolChoice{Mode: chat.ToolNone}},
			give: []string{"{\"name\":", "\"now\"}"}, wantText: "{\"name\":\"now\"}", wantStreamed: 2, wantReason: chat.FinishStop},
		{name: "plain text streams after first char", turn: withTools, give: []string{"  ", "\nHel", "lo"},
			wantText: "  \nHello", wantStreamed: 2, wantReason: chat.FinishStop},
		{name: "python fence streams once known", turn: withTools, give: []string{"``", "`pyt", "hon\nx=1\n", "```"},
			wantText: "```python\nx=1\n```", wantStreamed: 2, wantReason: chat.FinishStop},
		{name: "json call split across deltas", turn: withTools,
			give:      []string{"```js", "on\n{\"tool_calls\":[{\"name\":\"now\",", "\"arguments\":{}}]}\n`", "``"},
			wantCalls: 1, wantReason: chat.FinishToolCalls},
		{name: "brace that is not a call is one text", turn: withTools, give: []string{"{not", " json}"},
			wantText: "{not json}", wantReason: chat.FinishStop},
		{name: "only whitespace", turn: withTools, give: []string{" \n"}, wantText: " \n", wantReason: chat.FinishStop},
		{name: "empty answer", turn: withTools, wantReason: chat.FinishStop},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			events, streamed, reason := feed(t, tt.turn, tt.give...)
			calls := 0
			for _, e := range events {
				if e.Type == chat.EventToolCall {
					calls++
				}
			}
			if got := joinText(events); got != tt.wantText || calls != tt.wantCalls || reason != tt.wantReason {
				t.Errorf("text %q, %d calls, reason %q; want %q, %d, %q", got, calls, reason, tt.wantText, tt.wantCalls, tt.wantReason)
			}
			if streamed != tt.wantStreamed {
				t.Errorf("%d events before Finish, want %d", streamed, tt.wantStreamed)
			}
		})
	}
}

// TestRoundTrip renders an assistant's calls as the contract's JSON form and
// parses them back.
func TestRoundTrip(t *testing.T) {
	answer := "```json\n" + `{"tool_calls": [{"name": "search", "arguments": {"query": "<<<x>>>\n", "n": 2}}]}` + "\n```"
	events, _, reason := feed(t, &chat.Turn{Tools: tools}, strings.SplitAfter(answer, " ")...)
	if reason != chat.FinishToolCalls || len(events) != 1 || events[0].ToolCall.Arguments != `{"query":"<<<x>>>\n","n":2}` {
		t.Fatalf("got %+v %q, want one search call", events, reason)
	}
}
