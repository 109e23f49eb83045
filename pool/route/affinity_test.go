package route

import (
	"testing"

	"github.com/poolgate/poolgate/internal/chat"
)

func TestConversationKeyCanonicalForm(t *testing.T) {
	base := []chat.Message{{Role: chat.RoleUser, Content: "hi"},
		{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: "call_1", Name: "read", Arguments: `{"path":"a","limit":2}`}}},
		{Role: chat.RoleTool, ToolCallID: "call_1", Content: "data"}}
	key := func(msgs []chat.Message, owner string) string {
		return conversationKey(owner, "m", msgs, nil)
	}
	want := key(base, "o1")
	with := func(f func(m []chat.Message)) []chat.Message {
		c := append([]chat.Message(nil), base...)
		c[1].ToolCalls = append([]chat.ToolCall(nil), base[1].ToolCalls...)
		f(c)
		return c
	}
	same := []struct {
		name string
		give string
	}{
		{"arguments re-encoded with other key order and spaces", key(with(func(m []chat.Message) {
			m[1].ToolCalls[0].Arguments = ` { "limit": 2, "path": "a" } `
		}), "o1")},
		{"another call id", key(with(func(m []chat.Message) { m[1].ToolCalls[0].ID = "toolu_9" }), "o1")},
		{"text with surrounding space", key(with(func(m []chat.Message) { m[0].Content = "  hi\n" }), "o1")},
		{"reminder blocks rewritten", key(with(func(m []chat.Message) {
			m[0].Content = "<system-reminder>\nToday is Monday.\n</system-reminder>\nhi"
		}), "o1")},
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
		{"another owner", key(base, "o2")},
		{"edited text", key(with(func(m []chat.Message) { m[0].Content = "hello" }), "o1")},
		{"other arguments", key(with(func(m []chat.Message) { m[1].ToolCalls[0].Arguments = `{"path":"b","limit":2}` }), "o1")},
		{"text around a reminder edited", key(with(func(m []chat.Message) {
			m[0].Content = "<system-reminder>x</system-reminder>hello"
		}), "o1")},
		{"one message fewer", key(base[:2], "o1")},
	}
	for _, tt := range differ {
		t.Run(tt.name, func(t *testing.T) {
			if tt.give == want {
				t.Errorf("key unchanged by %s", tt.name)
			}
		})
	}
}
