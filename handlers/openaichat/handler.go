// Package openaichat serves OpenAI's POST /v1/chat/completions: it decodes
// the wire JSON into a neutral chat.Request and encodes the answer as one
// chat.completion body or as chat.completion.chunk SSE frames. Opening the
// answer is the edge's; keep-alives, the stream's ending and errors are
// the relay's; the error shape is openaierr's. It imports no web
// framework.
//
// Stream framing: the SSE headers go out with the first event (or the first
// keep-alive), so a failure before that is a JSON error with its real status.
// A failure after it is one data frame holding {"error":{...}} (the shape of
// an error body, which OpenAI's SDKs raise as an error), and the stream then
// closes WITHOUT "data: [DONE]": [DONE] means the answer is complete, so a
// client that ignores the error frame still sees a truncated stream.
package openaichat

import (
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/handlers/openaierr"
	"github.com/poolgate/poolgate/handlers/relay"
)

// Config tunes the handler. The zero value is usable.
type Config struct {
	// KeepAlive is how long a stream may stay silent before an SSE comment is
	// sent to keep proxies and clients from timing out. Default 15s; negative
	// disables keep-alives. A keep-alive before the first event commits the
	// stream, so an error after it is an in-stream error, not a JSON status.
	KeepAlive time.Duration
	// WriteTimeout bounds each write and flush of a stream, so a client that
	// stops reading cannot hold the worker. Default 30s.
	WriteTimeout time.Duration
	// CountDropped counts request fields that were accepted but dropped
	// (nil: not counted).
	CountDropped httpx.FieldCounter
	// PythonCompat adds the Python gateway's "served_by" (the instance) and
	// "latency" ({first_token_ms, total_ms}) to non-stream bodies, for the
	// clients of that gateway that read them, and answers a logged-out pool
	// with its 401 (apierr.ForPythonGateway). Default off: they are not in
	// OpenAI's shape (the X-Poolgate-Instance header names the instance).
	PythonCompat bool
}

// protocol is this package's label in metrics and logs.
const protocol = "chat"

// Handler serves chat completions. It is safe for concurrent use.
type Handler struct {
	cfg   Config
	relay *relay.Relay
	log   *slog.Logger
	// now and newID are replaced by tests for stable transcripts.
	now   func() time.Time
	newID func(prefix string) string
}

// New returns a handler. A nil log discards logs.
func New(cfg Config, log *slog.Logger) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	writeError := openaierr.Write
	if cfg.PythonCompat {
		writeError = apierr.PythonGatewayWriter(writeError)
	}
	rl := relay.New(relay.Config{Protocol: protocol, KeepAlive: cfg.KeepAlive, WriteTimeout: cfg.WriteTimeout,
		WriteError: writeError}, log)
	return &Handler{cfg: cfg, relay: rl, log: log, now: time.Now, newID: randomID}
}

// idChars are the characters of generated ids, like OpenAI's.
const idChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// randomID returns prefix plus 24 random characters. The ids only need to be
// unique, not secret, so the fast non-crypto generator is enough.
func randomID(prefix string) string {
	var b [24]byte
	for i := range b {
		b[i] = idChars[rand.N(len(idChars))]
	}
	return prefix + string(b[:])
}

// Relay is the protocol's relay (relay.Protocol).
func (h *Handler) Relay() *relay.Relay { return h.relay }

// Endpoints are the chat completions route, and its path without /v1 for
// clients whose base URL has none (relay.Protocol).
func (h *Handler) Endpoints() []relay.Endpoint {
	return []relay.Endpoint{{Method: http.MethodPost, Path: "/v1/chat/completions"},
		{Method: http.MethodPost, Path: "/chat/completions"}}
}

// Decode decodes a POST /v1/chat/completions request into its turn
// (relay.Protocol).
func (h *Handler) Decode(r *http.Request, body []byte) (*relay.Decoded, error) {
	req, opt, err := decodeRequest(body)
	if err != nil {
		return nil, err
	}
	opt.dropped.Report(r.Context(), h.log, h.cfg.CountDropped, protocol)
	id, created := h.newID("chatcmpl-"), h.now().Unix()
	t := &relay.Decoded{Request: req}
	if opt.stream {
		t.Stream = func(sse *relay.SSE) relay.Encoder {
			return &stream{w: sse, enc: newStreamEncoder(id, req.Model, created, opt.includeUsage), newID: h.newID}
		}
		return t, nil
	}
	rp := &reply{c: completion{ID: id, Object: "chat.completion", Created: created, Model: req.Model}, newID: h.newID}
	if h.cfg.PythonCompat {
		rp.compat = &pythonCompat{start: time.Now()}
	}
	t.Body = rp
	return t, nil
}
