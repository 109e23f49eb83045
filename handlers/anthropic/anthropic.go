// Package anthropic serves Anthropic's Messages API (POST /v1/messages and
// /v1/messages/count_tokens) on plain net/http. It sits between the gin
// routes in handlers and the pool's router: it decodes and validates wire
// JSON into a neutral chat.Request, calls the router, and writes the
// neutral events back as one JSON message or as Anthropic's SSE events
// through httpx.SSE. It never sees another protocol's types (STYLE 13).
package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"runtime"
	"strconv"
	"time"

	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool"
)

// Chatter is the router as this package uses it. An error from Chat happened
// before any event; otherwise the channel ends with one EventDone or
// EventError and is closed by the router.
type Chatter interface {
	Chat(ctx context.Context, req *chat.Request) (<-chan chat.Event, error)
}

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
}

// protocol is this package's label in metrics and logs.
const protocol = "messages"

// Handler serves the Messages API. It is safe for concurrent use.
type Handler struct {
	cfg    Config
	chat   Chatter
	log    *slog.Logger
	counts chan struct{} // count_tokens slots
}

// New returns a Handler that sends requests to chat. A nil log discards.
func New(cfg Config, chat Chatter, log *slog.Logger) *Handler {
	if cfg.PingInterval == 0 {
		cfg.PingInterval = 15 * time.Second
	}
	if cfg.CountConcurrency <= 0 {
		cfg.CountConcurrency = runtime.GOMAXPROCS(0)
	}
	if cfg.CountWait <= 0 {
		cfg.CountWait = 5 * time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Handler{cfg: cfg, chat: chat, log: log, counts: make(chan struct{}, cfg.CountConcurrency)}
}

// Messages serves POST /v1/messages, streaming when the body says stream.
func (h *Handler) Messages(w http.ResponseWriter, r *http.Request) {
	body, err := httpx.ReadBody(r)
	if err != nil {
		writeMapped(w, err)
		return
	}
	d, err := h.decode(r, body, false)
	if err != nil {
		writeMapped(w, err)
		return
	}
	in, req := &d.wire, &d.chat
	// The router's goroutines select on this ctx; cancelling it on return
	// frees them even when we stop reading early (a failed client write).
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	req.RequestID = httpx.RequestID(ctx)
	req.APIKey = httpx.APIKey(ctx)
	if req.Stream {
		h.stream(ctx, cancel, w, in.Model, req)
		return
	}
	events, err := h.chat.Chat(ctx, req)
	if errors.Is(err, pool.ErrForwarded) {
		return // another replica answered
	}
	if err != nil {
		h.failBeforeStart(ctx, w, err)
		return
	}
	h.reply(ctx, w, in.Model, events)
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

// next receives one event. While it waits, each tick sends a ping through
// enc (tick is nil before a stream starts). A stream that ends without a
// closing event (the router gave up, ctx ended) is an error.
func next(ctx context.Context, events <-chan chat.Event, tick <-chan time.Time, enc *streamEncoder) (chat.Event, error) {
	for {
		select {
		case ev, ok := <-events:
			switch {
			case !ok && ctx.Err() != nil:
				return ev, ctx.Err()
			case !ok:
				return ev, chat.ErrWorkerGone
			case ev.Type == chat.EventError && ev.Err == nil:
				return ev, chat.ErrWorkerGone
			case ev.Type == chat.EventError:
				return ev, ev.Err
			}
			return ev, nil
		case <-tick:
			if err := enc.ping(); err != nil {
				return chat.Event{}, err
			}
		case <-ctx.Done():
			return chat.Event{}, ctx.Err()
		}
	}
}

// failBeforeStart answers a failure that came before any byte was sent,
// unless the client itself went away.
func (h *Handler) failBeforeStart(ctx context.Context, w http.ResponseWriter, err error) {
	if ctx.Err() == context.Canceled {
		return // the client is gone; nobody reads an answer
	}
	h.log.LogAttrs(ctx, slog.LevelWarn, "messages: request failed",
		slog.String("request_id", httpx.RequestID(ctx)), slog.Any("err", err))
	writeMapped(w, err)
}

// reply buffers the whole answer and writes it as one message.
func (h *Handler) reply(ctx context.Context, w http.ResponseWriter, model string, events <-chan chat.Event) {
	var c collector
	for {
		ev, err := next(ctx, events, nil, nil)
		if err != nil {
			h.failBeforeStart(ctx, w, err)
			return
		}
		if ev.Type != chat.EventDone {
			c.add(&ev)
			continue
		}
		b, err := json.Marshal(c.body(model, &ev))
		if err != nil {
			h.failBeforeStart(ctx, w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		_, _ = w.Write(b) // a write error means the client left; nothing to do
		return
	}
}

// stream writes the answer as SSE. Headers go out with the first upstream
// event, so an error before it is still a JSON error with its status; but
// when the answer takes longer than a ping interval to start (a wait in the
// queue, an answer held back until it is clear it is not a tool call), the
// stream opens early with message_start and pings, as Anthropic's own API
// does, and a failure then comes as an error event.
func (h *Handler) stream(ctx context.Context, cancel context.CancelFunc, w http.ResponseWriter, model string, req *chat.Request) {
	sse := httpx.NewSSE(w)
	enc := newStreamEncoder(sse, model)
	events, err := httpx.Await(h.cfg.PingInterval, cancel,
		func() (<-chan chat.Event, error) { return h.chat.Chat(ctx, req) },
		func() error {
			switch {
			case !httpx.Claim(ctx, httpx.Local):
				return nil // another replica is answering
			case !sse.Started():
				if err := enc.start(); err != nil {
					return err
				}
			}
			return enc.ping()
		})
	if errors.Is(err, pool.ErrForwarded) {
		return // another replica answered
	}
	var ev chat.Event
	if err == nil {
		ev, err = next(ctx, events, nil, nil)
	}
	if err != nil {
		if !sse.Started() {
			h.failBeforeStart(ctx, w, err)
			return
		}
		h.failMidStream(ctx, enc, err)
		return
	}
	if !sse.Started() {
		if err := enc.start(); err != nil {
			return // the client is gone
		}
	}
	var tick <-chan time.Time
	if h.cfg.PingInterval > 0 {
		t := time.NewTicker(h.cfg.PingInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		var werr error
		switch ev.Type {
		case chat.EventText:
			werr = enc.text(ev.Text)
		case chat.EventToolCall:
			werr = enc.toolCall(&ev.ToolCall)
		case chat.EventDone:
			_ = enc.done(&ev) // the stream is over either way
			return
		}
		if werr != nil {
			return // the client stopped reading; cancel() ends the worker turn
		}
		ev, err = next(ctx, events, tick, enc)
		if err != nil {
			h.failMidStream(ctx, enc, err)
			return
		}
	}
}

// failMidStream ends a started stream with an error event, unless the
// client itself went away.
func (h *Handler) failMidStream(ctx context.Context, enc *streamEncoder, err error) {
	if ctx.Err() == context.Canceled {
		return
	}
	h.log.LogAttrs(ctx, slog.LevelWarn, "messages: stream failed mid-way",
		slog.String("request_id", httpx.RequestID(ctx)), slog.Any("err", err))
	_ = enc.fail(err)
}
