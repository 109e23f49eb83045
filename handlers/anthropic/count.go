package anthropic

import (
	"net/http"
	"strconv"
	"time"

	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/tokens"
)

// CountTokens serves POST /v1/messages/count_tokens, as {"input_tokens": n}:
// the prompt tokens of the request counted the way the router counts the
// usage of a turn (chat.PromptTokens with the gateway's BPE tokenizer), so a
// count and the usage of the same request agree. It validates the body like
// Messages does, minus max_tokens, so a request count_tokens accepts is one
// Messages accepts.
func (h *Handler) CountTokens(w http.ResponseWriter, r *http.Request) {
	body, err := httpx.ReadBody(r)
	if err != nil {
		h.relay.Fail(r.Context(), w, err)
		return
	}
	if !h.counts.Take(r.Context()) {
		h.relay.Fail(r.Context(), w, &chat.OverloadedError{RetryAfter: time.Second})
		return
	}
	defer h.counts.Release()
	d, err := h.decode(r, body, true)
	if err != nil {
		h.relay.Fail(r.Context(), w, err)
		return
	}
	n := chat.PromptTokens(d.chat.Messages, tokens.Count)
	b := strconv.AppendInt(append(make([]byte, 0, 32), `{"input_tokens":`...), int64(n), 10)
	httpx.WriteJSON(w, http.StatusOK, append(b, '}'))
}
