package pool

import (
	"encoding/json"
	"testing"
)

func TestConversationKeyCanonicalForm(t *testing.T) {
	tool := Tool{Name: "read", Parameters: json.RawMessage(`{"type": "object", "properties": {"path": {"type": "string"}}}`)}
	base := []Message{{Role: RoleUser, Content: "hi"},
		{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "call_1", Name: "read", Arguments: `{"path":"a","limit":2}`}}},
		{Role: RoleTool, ToolCallID: "call_1", Content: "data"}}
	key := func(tools []Tool, msgs []Message, owner string) string {
		return conversationKey(owner, "m", tools, ToolChoice{}, msgs, nil)
	}
	want := key([]Tool{tool}, base, "o1")
	with := func(f func(m []Message)) []Message {
		c := append([]Message(nil), base...)
		c[1].ToolCalls = append([]ToolCall(nil), base[1].ToolCalls...)
		f(c)
		return c
	}
	same := []struct {
		name string
		give string
	}{
		{"arguments re-encoded with other key order and spaces", key([]Tool{tool}, with(func(m []Message) {
			m[1].ToolCalls[0].Arguments = ` { "limit": 2, "path": "a" } `
		}), "o1")},
		{"another call id", key([]Tool{tool}, with(func(m []Message) { m[1].ToolCalls[0].ID = "toolu_9" }), "o1")},
		{"text with surrounding space", key([]Tool{tool}, with(func(m []Message) { m[0].Content = "  hi\n" }), "o1")},
		{"schema with other whitespace", key([]Tool{{Name: "read", Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)}}, base, "o1")},
	}
	for _, tt := range same {
		t.Run(tt.name, func(t *testing.T) {
			if tt.give != want {
				t.Errorf("key %s, want %s", tt.give, want)
			}
		})
	}
	differ := []struct {
		name string
		give string
	}{
		{"another owner", key([]Tool{tool}, base, "o2")},
		{"edited text", key([]Tool{tool}, with(func(m []Message) { m[0].Content = "hello" }), "o1")},
		{"other arguments", key([]Tool{tool}, with(func(m []Message) { m[1].ToolCalls[0].Arguments = `{"path":"b","limit":2}` }), "o1")},
		{"no tools", key(nil, base, "o1")},
		{"one message fewer", key([]Tool{tool}, base[:2], "o1")},
	}
	for _, tt := range differ {
		t.Run(tt.name, func(t *testing.T) {
			if tt.give == want {
				t.Errorf("key unchanged by %s", tt.name)
			}
		})
	}
}
