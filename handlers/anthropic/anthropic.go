// Package anthropic serves Anthropic's Messages API (POST /v1/messages and
// /v1/messages/count_tokens) on plain net/http: it decodes the wire JSON
// into a neutral chat.Request, encodes the answer as one message or as
// Anthropic's SSE events, and names errors in Anthropic's shape. Opening
// the answer is the edge's; keep-alives (ping events), the stream's ending
// and the classification of errors are the relay's and apierr's. It never sees
// another protocol's types.
package anthropic

import (
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/internal/chat"
)

// Config tunes the Messages handler.
type Config struct {
	relay.Options
	// Count counts a text's tokens; when set, message_start's usage
	// carries the prompt's input tokens counted with it (as count_tokens
	// counts them), which Anthropic's clients read there. Default nil: 0
	// there, the count comes in message_delta.
	Count func(string) int
}

// protocol is this package's label in metrics and logs.
const protocol = "messages"

// Handler serves the Messages API. It is safe for concurrent use.
type Handler struct {
	relay.Codec
	count   func(string) int
	created string // the models' creation time, which workers don't report
}

var (
	_ relay.Protocol = (*Handler)(nil)
	_ relay.Counter  = (*Handler)(nil)
	_ relay.Lister   = (*Handler)(nil)
)

// New returns a Handler. A nil log discards.
func New(cfg Config, log *slog.Logger) *Handler {
	return &Handler{Codec: relay.NewCodec(relay.Config{Options: cfg.Options, Protocol: protocol, WriteError: WriteProblem,
		Dropped: DroppedFields}, log), count: cfg.Count, created: time.Now().UTC().Format(time.RFC3339)}
}

// Endpoints are POST /v1/messages, its count_tokens, and the model list
// for an Anthropic client (relay.Protocol).
func (h *Handler) Endpoints() []relay.Endpoint {
	return []relay.Endpoint{{Method: http.MethodPost, Path: "/v1/messages", Serves: relay.ServeTurn},
		{Method: http.MethodPost, Path: "/v1/messages/count_tokens", Serves: relay.ServeCount},
		{Method: http.MethodGet, Path: "/v1/models", Serves: relay.ServeModels}}
}

// Claims reports whether r speaks the Messages API: its paths, or any
// request of a client that sends anthropic-version (the Anthropic SDK's
// models.list) (relay.Protocol).
func (h *Handler) Claims(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, "/v1/messages") || r.Header.Get("anthropic-version") != ""
}

// Decode decodes a POST /v1/messages request into its turn, streamed when
// the body says stream (relay.Protocol).
func (h *Handler) Decode(r *http.Request, body []byte) (*relay.Decoded, error) {
	d, err := h.decode(r, body, false)
	if err != nil {
		return nil, err
	}
	req := &d.chat
	t := &relay.Decoded{Request: req}
	if !req.Stream {
		t.Body = &reply{model: d.wire.Model}
		return t, nil
	}
	t.Stream = func(sse *relay.SSE) relay.Encoder {
		enc := newStreamEncoder(sse, d.wire.Model)
		if h.count != nil {
			enc.inputTokens = chat.PromptTokens(req.Messages, h.count)
		}
		return enc
	}
	return t, nil
}

// decode decodes a body and reports what it dropped. Claude Code names its
// conversation in a header, which beats the hint in the body.
func (h *Handler) decode(r *http.Request, body []byte, forCount bool) (*decoded, error) {
	d, err := decodeMessages(body, forCount)
	if err != nil {
		return nil, err
	}
	if s := r.Header.Get("X-Claude-Code-Session-Id"); s != "" && len(s) <= 128 {
		d.chat.AffinityHint = s
	}
	h.Report(r.Context(), &d.dropped)
	return d, nil
}
