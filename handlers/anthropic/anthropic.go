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
	"time"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/internal/chat"
)

// Config tunes the Messages handler.
type Config struct {
	// PingInterval is how long a started stream may stay silent before a
	// ping event keeps proxies from cutting it. Default 15s; negative disables.
	PingInterval time.Duration
	// CountDropped counts request fields that were accepted but dropped
	// (nil: not counted).
	CountDropped httpx.FieldCounter
	// CountConcurrency bounds the count_tokens requests tokenized at once
	// (default GOMAXPROCS): they take no worker slot, so without a bound a
	// burst of 16 MiB bodies would take every core.
	CountConcurrency int
	// CountWait is how long a count_tokens request waits for its turn
	// before a 429 (default 5s).
	CountWait time.Duration
	// Count counts a text's tokens; when set, message_start's usage
	// carries the prompt's input tokens counted with it (as count_tokens
	// counts them), which Anthropic's clients read there. Default nil: 0
	// there, the count comes in message_delta.
	Count func(string) int
	// PythonCompat answers a logged-out pool with the Python gateway's 401
	// authentication_error, not 529 (apierr.ForPythonGateway). Default off.
	PythonCompat bool
}

// protocol is this package's label in metrics and logs.
const protocol = "messages"

// Handler serves the Messages API. It is safe for concurrent use.
type Handler struct {
	cfg    Config
	relay  *relay.Relay
	log    *slog.Logger
	counts *httpx.Slots // count_tokens slots
}

// New returns a Handler. A nil log discards.
func New(cfg Config, log *slog.Logger) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	writeError := WriteProblem
	if cfg.PythonCompat {
		writeError = apierr.PythonGatewayWriter(writeError)
	}
	rl := relay.New(relay.Config{Protocol: protocol, KeepAlive: cfg.PingInterval, WriteError: writeError}, log)
	return &Handler{cfg: cfg, relay: rl, log: log, counts: httpx.NewSlots(cfg.CountConcurrency, cfg.CountWait)}
}

// Relay is the protocol's relay (relay.Protocol).
func (h *Handler) Relay() *relay.Relay { return h.relay }

// Endpoints are POST /v1/messages and its count_tokens (relay.Protocol).
func (h *Handler) Endpoints() []relay.Endpoint {
	return []relay.Endpoint{{Method: http.MethodPost, Path: "/v1/messages"},
		{Method: http.MethodPost, Path: "/v1/messages/count_tokens", Serves: relay.ServeCount, Serve: h.CountTokens}}
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
		if h.cfg.Count != nil {
			enc.inputTokens = chat.PromptTokens(req.Messages, h.cfg.Count)
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
	d.dropped.Report(r.Context(), h.log, h.cfg.CountDropped, protocol)
	return d, nil
}
