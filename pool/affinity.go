package pool

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"hash"
	"strings"
)

// Conversation keys. A key is "<owner>:<conversation>": owner is a hash of
// the API key (so two keys never share a session, and one key's entries can
// be flushed alone), conversation a hash of the model, the tool
// configuration and the canonical transcript. Canonical means what survives
// a client's round trip: trimmed text, tool calls by name and
// key-sorted arguments, no call ids (clients may re-mint them).

// OwnerKey returns the owner part of conversation keys for an API key.
func OwnerKey(apiKey string) string {
	sum := sha256.Sum256([]byte("poolgate-owner\x00" + apiKey))
	return hex.EncodeToString(sum[:8])
}

// conversationKey hashes msgs under the request's model and tools.
func conversationKey(owner, model string, tools []Tool, choice ToolChoice, msgs []Message, extra *Message) string {
	h := sha256.New()
	w := func(s string) {
		_, _ = h.Write([]byte(s))
		_, _ = h.Write([]byte{0})
	}
	w(model)
	for _, t := range tools {
		w(t.Name)
		w(t.Description)
		writeCanonicalJSON(h, t.Parameters)
	}
	w(string(choice.Mode))
	w(choice.Name)
	for i := range msgs {
		writeMessage(h, &msgs[i])
	}
	if extra != nil {
		writeMessage(h, extra)
	}
	return owner + ":" + hex.EncodeToString(h.Sum(nil)[:16])
}

func writeMessage(h hash.Hash, m *Message) {
	_, _ = h.Write([]byte{0x1e})
	_, _ = h.Write([]byte(m.Role))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(strings.TrimSpace(m.Content)))
	for _, tc := range m.ToolCalls {
		_, _ = h.Write([]byte{0x1f})
		_, _ = h.Write([]byte(tc.Name))
		_, _ = h.Write([]byte{0})
		writeCanonicalJSON(h, json.RawMessage(tc.Arguments))
	}
}

// writeCanonicalJSON writes raw re-encoded with sorted keys and no spaces, so
// formatting differences between client and gateway don't split a
// conversation; invalid JSON is hashed as trimmed text.
func writeCanonicalJSON(h hash.Hash, raw json.RawMessage) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		_, _ = h.Write(raw)
		return
	}
	b, err := json.Marshal(v) // maps marshal with sorted keys
	if err != nil {
		_, _ = h.Write(raw)
		return
	}
	_, _ = h.Write(b)
}

// lastAssistant returns the index of the newest assistant message, -1 if none:
// everything up to it is the part of the transcript an upstream session can
// already hold; what follows is the new turn.
func lastAssistant(msgs []Message) int {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == RoleAssistant {
			return i
		}
	}
	return -1
}

// affinityHint returns a stable hint for spreading new conversations.
func affinityHint(req *ChatRequest) string {
	if req.AffinityHint != "" {
		return "u:" + req.AffinityHint
	}
	for _, m := range req.Messages {
		if m.Role == RoleSystem && m.Content != "" {
			return "s:" + m.Content
		}
	}
	if len(req.Messages) > 0 {
		return "f:" + req.Messages[0].Content
	}
	return ""
}
