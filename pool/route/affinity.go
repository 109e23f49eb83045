package route

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"sync"

	"github.com/poolgate/poolgate/internal/chat"
)

// Conversation keys. A key is "<owner>:<conversation>": owner is a hash of
// the API key (so two keys never share a session, and one key's entries can
// be flushed alone), conversation a hash of the model and the canonical
// transcript. Canonical means what survives a client's round trip: trimmed
// text without agents' reminder blocks, tool calls by name and key-sorted
// arguments, no call ids (clients may re-mint them). The tools offered are
// not part of it: every prompt carries the tools anew, so an upstream
// session is not tied to a tool set, and agents change theirs mid-way (a
// tool search loads one, an MCP server connects).

// conversationKey hashes msgs under the request's model and tools. It
// writes everything into one pooled buffer and hashes that once: it runs
// twice per follow-up turn, so it must not allocate per message.
func conversationKey(owner, model string, msgs []chat.Message, extra *chat.Message) string {
	bp := keyBufs.Get().(*[]byte)
	b := (*bp)[:0]
	b = appendField(b, model)
	for i := range msgs {
		b = appendMessage(b, &msgs[i])
	}
	if extra != nil {
		b = appendMessage(b, extra)
	}
	sum := sha256.Sum256(b)
	*bp = b
	keyBufs.Put(bp)
	var out [64]byte
	n := copy(out[:], owner)
	out[n] = ':'
	hex.Encode(out[n+1:], sum[:16])
	return string(out[:n+33])
}

var keyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

func appendField(b []byte, s string) []byte {
	b = append(b, s...)
	return append(b, 0)
}

func appendMessage(b []byte, m *chat.Message) []byte {
	b = append(b, 0x1e)
	b = appendField(b, m.Role)
	b = appendText(b, m.Content)
	for _, tc := range m.ToolCalls {
		b = append(b, 0x1f)
		b = appendField(b, tc.Name)
		b = appendCanonical(b, tc.Arguments)
	}
	return b
}

// Coding agents put <system-reminder> blocks into the transcript (the date,
// the files that changed, the skills on offer) and rewrite them from one
// turn to the next, also in messages the upstream session already holds. They
// are context for the model, not the conversation: leaving them out of the
// key lets a follow-up find its session after the agent rewrote them.
const (
	reminderOpen  = "<system-reminder>"
	reminderClose = "</system-reminder>"
)

// appendText appends text trimmed and without reminder blocks.
func appendText(b []byte, s string) []byte {
	s = strings.TrimSpace(s)
	for {
		i := strings.Index(s, reminderOpen)
		if i < 0 {
			break
		}
		j := strings.Index(s[i:], reminderClose)
		if j < 0 {
			break
		}
		b = append(b, strings.TrimSpace(s[:i])...)
		s = strings.TrimSpace(s[i+j+len(reminderClose):])
	}
	return append(b, s...)
}

// appendCanonical appends tool arguments re-encoded with sorted keys and no
// spaces, so a client that re-encodes a call's arguments (the Anthropic SDKs
// send them back as objects) doesn't split the conversation; invalid JSON is
// appended trimmed.
func appendCanonical(b []byte, args string) []byte {
	args = strings.TrimSpace(args)
	if args == "" || args == "{}" {
		return append(b, args...)
	}
	if c, ok := canonicalArgs.get(args); ok {
		return append(b, c...)
	}
	n := len(b)
	b = canonicalize(b, args)
	canonicalArgs.put(args, string(b[n:]))
	return b
}

func canonicalize(b []byte, args string) []byte {
	var v any
	if err := json.Unmarshal([]byte(args), &v); err != nil {
		return append(b, args...)
	}
	out, err := json.Marshal(v) // maps marshal with sorted keys
	if err != nil {
		return append(b, args...)
	}
	return append(b, out...)
}

// lastAssistant returns the index of the newest assistant message, -1 if none:
// everything up to it is the part of the transcript an upstream session can
// already hold; what follows is the new turn.
func lastAssistant(msgs []chat.Message) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == chat.RoleAssistant {
			return i
		}
	}
	return -1
}

// affinityHint returns a stable hint for spreading new conversations.
func affinityHint(req *chat.Request) string {
	if req.AffinityHint != "" {
		return "u:" + req.AffinityHint
	}
	for _, m := range req.Messages {
		if m.Role == chat.RoleSystem && m.Content != "" {
			return "s:" + m.Content
		}
	}
	if len(req.Messages) > 0 {
		return "f:" + req.Messages[0].Content
	}
	return ""
}

// argsCache remembers canonical tool arguments: a conversation's calls come
// back with every later turn, so each is canonicalized once, not per turn.
type argsCache struct {
	mu sync.Mutex
	m  map[string]string
}

// canonicalArgs is process-wide like keyBufs: a pure function's memo, with
// no state a caller could observe.
var canonicalArgs = &argsCache{m: map[string]string{}}

const argsCacheMax = 8192

func (c *argsCache) get(k string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *argsCache) put(k, v string) {
	if len(k) > 4096 {
		return // big payloads are rare and not worth the memory
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= argsCacheMax {
		clear(c.m)
	}
	c.m[k] = v
}
