package route

import (
	"strings"
	"testing"

	"github.com/poolgate/poolgate/internal/chat"
)

func TestConversationKeyCanonicalForm(t *testing.T) {
	base := []chat.Message{{Role: chat.RoleUser, Content: "hi"},
		{Role: chat.RoleAssistant, ToolCalls: []chat.ToolCall{{ID: "call_1", Name: "read", Arguments: `{"path":"a","limit":2}`}}},
		{Role: chat.RoleTool, ToolCallID: "call_1", Content: "data"}}
	key := func(msgs []chat.Message, owner string) AffinityKey {
		return newAffinityKey(owner, "m", msgs, nil)
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
		give AffinityKey
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
		give AffinityKey
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

// TestConversationKeyIsStable: keys are stored in Redis and must survive an
// upgrade; these are what the transcripts hashed to when the whole canonical
// transcript was first copied into one buffer.
func TestConversationKeyIsStable(t *testing.T) {
	big := strings.Repeat("lorem <system-reminder>x</system-reminder> ipsum\n", 2000) // several buffers
	tests := []struct {
		give []chat.Message
		want AffinityKey
	}{
		{[]chat.Message{{Role: chat.RoleUser, Content: "hi"}}, "owner:e54d1419f37338664ad79e5035f58f60"},
		{[]chat.Message{{Role: chat.RoleSystem, Content: big}, {Role: chat.RoleUser, Content: " q "},
			{Role: chat.RoleAssistant, Content: "a", ToolCalls: []chat.ToolCall{{ID: "c", Name: "read", Arguments: ` {"b":1, "a":[2]} `},
				{Name: "x", Arguments: "not json"}}},
			{Role: chat.RoleTool, ToolCallID: "c", Content: "r\xff"}}, "owner:d0f1502fb245c94a616831ab215ea23a"},
	}
	for _, tt := range tests {
		if got := newAffinityKey("owner", "m", tt.give, &chat.Message{Role: chat.RoleAssistant, Content: "ans"}); got != tt.want {
			t.Errorf("key %s, want %s", got, tt.want)
		}
	}
}

func TestOwnedBy(t *testing.T) {
	tests := []struct {
		key   AffinityKey
		owner string
		want  bool
	}{
		{key: "ab:c", owner: "ab", want: true},
		{key: "abc:d", owner: "ab", want: false},
		{key: "ab", owner: "ab", want: false},
		{key: "ab:c", owner: "", want: true},
		{key: "xb:c", owner: "ab", want: false},
	}
	for _, tt := range tests {
		if got := tt.key.OwnedBy(tt.owner); got != tt.want {
			t.Errorf("%q.OwnedBy(%q) = %v, want %v", tt.key, tt.owner, got, tt.want)
		}
	}
}
