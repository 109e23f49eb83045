// Package gemini serves the Gemini API's generateContent family on plain
// net/http: models/{model}:generateContent, :streamGenerateContent (server-
// sent events with alt=sse, else one JSON array written as it comes) and
// :countTokens, under /v1beta and /v1, and the model list in its shape. It
// decodes the wire JSON into a neutral chat.Request (decode.go,
// contents.go, schema.go), encodes the answer as Gemini's responses
// (encode.go) and names errors in Google's shape (errors.go); these are
// pure code, knowing nothing of the pool. This file is the codec the edge
// runs (relay.Protocol: its routes and Decode); the relay keeps streams
// alive and ends them, apierr classifies errors. It never sees another
// protocol's types.
package gemini

import (
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/tokens"
)

// Config tunes the Gemini handler.
type Config struct {
	// KeepAlive is how long a started stream may stay quiet before a
	// response without parts keeps it open. Default 15s; negative
	// disables.
	KeepAlive time.Duration
	// CountDropped counts request fields that were accepted but dropped
	// (nil: not counted).
	CountDropped httpx.FieldCounter
	// CountConcurrency bounds the countTokens requests tokenized at once
	// (default GOMAXPROCS): they take no worker slot.
	CountConcurrency int
	// CountWait is how long a countTokens request waits for its turn
	// before a 429 (default 5s).
	CountWait time.Duration
}

// protocol is this package's label in metrics and logs.
const protocol = "gemini"

// Handler serves the Gemini API. It is safe for concurrent use.
type Handler struct {
	cfg    Config
	relay  *relay.Relay
	log    *slog.Logger
	counts *httpx.Slots // countTokens slots
}

// New returns a Handler. A nil log discards.
func New(cfg Config, log *slog.Logger) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rl := relay.New(relay.Config{Protocol: protocol, KeepAlive: cfg.KeepAlive, WriteError: WriteProblem}, log)
	return &Handler{cfg: cfg, relay: rl, log: log, counts: httpx.NewSlots(cfg.CountConcurrency, cfg.CountWait)}
}

// Relay is the protocol's relay (relay.Protocol).
func (h *Handler) Relay() *relay.Relay { return h.relay }

// Endpoints are a model's methods under /v1beta and /v1: its paths put the
// method after a colon in the last segment
// (models/gemini-2.5-pro:generateContent), which gin cannot route on, so
// one catch-all under models/ takes them and the method is read here
// (relay.Protocol). The model listings are the edge's, which serves every
// protocol's.
func (h *Handler) Endpoints() []relay.Endpoint {
	var rs []relay.Endpoint
	for _, v := range []string{"/v1beta", "/v1"} {
		rs = append(rs, relay.Endpoint{Method: http.MethodPost, Path: v + "/models/*action", Serve: h.CountTokens, Pick: pick})
	}
	return rs
}

// pick says how the edge serves a model's method: generateContent and
// streamGenerateContent run a turn, countTokens counts under the key's
// limits, anything else is no route.
func pick(r *http.Request) relay.Serving {
	a, ok := ParseAction(r.URL.Path)
	switch {
	case ok && (a.Method == MethodGenerate || a.Method == MethodStream):
		return relay.ServeTurn
	case ok && a.Method == MethodCount:
		return relay.ServeCount
	}
	return relay.ServeNone
}

// Decode decodes a models/{model}:generateContent request into its turn,
// and :streamGenerateContent into a streamed one: server-sent events
// (alt=sse) or a JSON array (relay.Protocol).
func (h *Handler) Decode(r *http.Request, body []byte) (*relay.Decoded, error) {
	a, _ := ParseAction(r.URL.Path) // the edge routes only a model's method here
	stream := a.Method == MethodStream
	d, err := decodeGenerate(body, a.Model, stream)
	if err != nil {
		return nil, err
	}
	d.dropped.Report(r.Context(), h.log, h.cfg.CountDropped, protocol)
	t := &relay.Decoded{Request: &d.chat}
	if !stream {
		t.Body = newReply(a.Model)
		return t, nil
	}
	raw := r.URL.Query().Get("alt") != "sse"
	if raw {
		t.ContentType = "application/json; charset=UTF-8"
	}
	t.Stream = func(s *relay.SSE) relay.Encoder { return newStreamEncoder(s, a.Model, raw) }
	return t, nil
}

// CountTokens serves models/{model}:countTokens as {"totalTokens": n}: the
// prompt tokens of the request counted the way the router counts a turn's
// usage, so a count and the usage of the same request agree. The body is
// decoded and validated as generateContent decodes it.
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
	a, _ := ParseAction(r.URL.Path)
	d, err := decodeCount(body, a.Model)
	if err != nil {
		h.relay.Fail(r.Context(), w, err)
		return
	}
	n := chat.PromptTokens(d.chat.Messages, tokens.Count)
	b := strconv.AppendInt(append(make([]byte, 0, 32), `{"totalTokens":`...), int64(n), 10)
	httpx.WriteJSON(w, http.StatusOK, append(b, '}'))
}
