package anthropic

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/tokens"
)

// CountTokens serves POST /v1/messages/count_tokens: the tokens of the
// rendered system prompt, messages and tool definitions by the gateway's BPE
// tokenizer (internal/tokens), as {"input_tokens": n}. It validates the body like Messages does, minus
// max_tokens, so a request count_tokens accepts is one Messages accepts.
func (h *Handler) CountTokens(w http.ResponseWriter, r *http.Request) {
	body, err := httpx.ReadBody(r)
	if err != nil {
		writeMapped(w, err)
		return
	}
	if !h.countSlot(r.Context()) {
		writeMapped(w, &chat.OverloadedError{RetryAfter: time.Second})
		return
	}
	defer func() { <-h.counts }()
	d, err := h.decode(r, body, true)
	if err != nil {
		writeMapped(w, err)
		return
	}
	n := promptTokens(&d.chat)
	b := strconv.AppendInt(append(make([]byte, 0, 32), `{"input_tokens":`...), int64(n), 10)
	b = append(b, '}')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

// countSlot waits, bounded, for a count_tokens slot.
func (h *Handler) countSlot(ctx context.Context) bool {
	select {
	case h.counts <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(h.cfg.CountWait)
	defer t.Stop()
	select {
	case h.counts <- struct{}{}:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// promptTokens counts a request with the gateway's BPE tokenizer the way
// the router counts prompts: the transcript with its per-message framing,
// and the tool definitions as one more system message (the workers get them
// in the prompt, since they have no native tool calling).
func promptTokens(req *chat.Request) int {
	msgs := make([]tokens.Message, 0, len(req.Messages)+1)
	if len(req.Tools) > 0 {
		var sb strings.Builder
		for _, t := range req.Tools {
			sb.WriteString(t.Name)
			sb.WriteString(": ")
			sb.WriteString(t.Description)
			sb.WriteByte('\n')
			sb.Write(t.Parameters)
			sb.WriteByte('\n')
		}
		msgs = append(msgs, tokens.Message{Role: chat.RoleSystem, Content: sb.String()})
	}
	for _, m := range req.Messages {
		extra := m.Name
		for _, tc := range m.ToolCalls {
			extra += tc.Name + tc.Arguments
		}
		msgs = append(msgs, tokens.Message{Role: m.Role, Content: m.Content, Extra: extra})
	}
	return tokens.CountMessages(msgs)
}
