package route

import (
	"regexp"
	"testing"

	"github.com/poolgate/poolgate/internal/chat"
)

func msgs(texts ...string) []chat.Message {
	roles := []string{chat.RoleUser, chat.RoleAssistant}
	var out []chat.Message
	for i, s := range texts {
		out = append(out, chat.Message{Role: roles[i%2], Content: s})
	}
	return out
}

// A conversation keeps its name from turn to turn; another opening,
// owner, model or key names another one.
func TestConversationNames(t *testing.T) {
	key := []byte("deployment key")
	system := chat.Message{Role: chat.RoleSystem, Content: "you are helpful"}
	withSystem := func(m []chat.Message) []chat.Message { return append([]chat.Message{system}, m...) }
	base := newNamer(key).name("own", "m", withSystem(msgs("hello")))
	tests := []struct {
		name  string
		key   []byte
		owner string
		model string
		give  []chat.Message
		same  bool
	}{
		{name: "its third turn", key: key, owner: "own", model: "m", give: withSystem(msgs("hello", "hi", "and?", "so", "more")), same: true},
		{name: "reminders and spaces around the opening", key: key, owner: "own", model: "m",
			give: withSystem(msgs("<system-reminder>today is Monday</system-reminder>\n hello ")), same: true},
		{name: "another replica with the same key", key: []byte("deployment key"), owner: "own", model: "m",
			give: withSystem(msgs("hello", "hi", "x")), same: true},
		{name: "another opening", key: key, owner: "own", model: "m", give: withSystem(msgs("hello!"))},
		{name: "another system prompt", key: key, owner: "own", model: "m", give: msgs("hello")},
		{name: "another owner", key: key, owner: "other", model: "m", give: withSystem(msgs("hello"))},
		{name: "another model", key: key, owner: "own", model: "m2", give: withSystem(msgs("hello"))},
		{name: "another key", key: []byte("another deployment"), owner: "own", model: "m", give: withSystem(msgs("hello"))},
		{name: "no key: a random one", owner: "own", model: "m", give: withSystem(msgs("hello"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := newNamer(tt.key).name(tt.owner, tt.model, tt.give)
			if !regexp.MustCompile(`^[0-9a-f]{12}$`).MatchString(got) {
				t.Fatalf("name %q, want twelve hex digits", got)
			}
			if (got == base) != tt.same {
				t.Errorf("name %s, the conversation's %s: want same %v", got, base, tt.same)
			}
		})
	}
}

// BenchmarkConversationName names a coding agent's turn: a long system
// prompt and first message, as every request pays for it once.
func BenchmarkConversationName(b *testing.B) {
	n := newNamer([]byte("k"))
	long := make([]byte, 16<<10)
	for i := range long {
		long[i] = 'a' + byte(i%26)
	}
	m := append([]chat.Message{{Role: chat.RoleSystem, Content: string(long)}}, msgs("fix the bug in main.go", "done", "thanks")...)
	b.ReportAllocs()
	for b.Loop() {
		_ = n.name("owner", "model", m)
	}
}
