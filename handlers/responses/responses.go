// Package responses serves OpenAI's Responses API (POST /v1/responses and
// GET/DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items) on plain
// net/http. It sits between the gin routes in handlers and the pool's router:
// it decodes and validates wire JSON into a neutral chat.Request, calls
// the router, writes the neutral events back as a response object or as the
// Responses stream events, and keeps each stored response (with the neutral
// transcript behind it) in a Store so previous_response_id can continue it.
package responses

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
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

// Store keeps stored responses as opaque bytes. The session package
// implements it (memory and Redis); bounding what it keeps, in all and per
// owner, is its job, the TTL is given per call, and the responses in keep
// (the earlier links of a chain) must live as long as the one saved. Load
// and Delete return session.ErrNotFound for an unknown id.
type Store interface {
	SaveResponse(ctx context.Context, owner, id string, data []byte, ttl time.Duration, keep ...string) error
	LoadResponse(ctx context.Context, id string) ([]byte, error)
	// LoadResponses loads several in one go: nil data for a missing one.
	LoadResponses(ctx context.Context, ids []string) ([][]byte, error)
	DeleteResponse(ctx context.Context, id string) error
}

// Config tunes the Responses handler.
type Config struct {
	// TTL is how long a stored response can be retrieved or continued.
	// Default 24h.
	TTL time.Duration
	// StoreTimeout bounds each store call; saving runs even when the client
	// has gone, so a finished answer can still be continued. Default 2s.
	StoreTimeout time.Duration
	// KeepAlive is how long a started stream may stay silent before an SSE
	// comment keeps proxies from cutting it. Default 15s; negative disables.
	KeepAlive time.Duration
	// CountDropped counts request fields that were accepted but dropped
	// (nil: not counted).
	CountDropped httpx.FieldCounter
}

// protocol is this package's label in metrics and logs.
const protocol = "responses"

// Handler serves the Responses API. It is safe for concurrent use.
type Handler struct {
	cfg   Config
	chat  Chatter
	store Store
	log   *slog.Logger
	now   func() time.Time
}

// New returns a Handler that answers through chat and keeps responses in
// store. A nil log discards.
func New(cfg Config, chat Chatter, store Store, log *slog.Logger) *Handler {
	if cfg.TTL == 0 {
		cfg.TTL = 24 * time.Hour
	}
	if cfg.StoreTimeout == 0 {
		cfg.StoreTimeout = 2 * time.Second
	}
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = 15 * time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Handler{cfg: cfg, chat: chat, store: store, log: log, now: time.Now}
}

// Create serves POST /v1/responses.
func (h *Handler) Create(w http.ResponseWriter, r *http.Request) {
	// The router's goroutines select on this ctx; cancelling it on return
	// frees them even when we stop reading early (a failed client write).
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	t, err := h.prepare(ctx, r)
	if err != nil {
		h.failBeforeStart(ctx, w, err)
		return
	}
	if t.d.chat.Stream {
		h.stream(ctx, cancel, w, t)
		return
	}
	events, err := h.chat.Chat(ctx, &t.d.chat)
	if errors.Is(err, pool.ErrForwarded) {
		return // another replica answered
	}
	if err != nil {
		h.failBeforeStart(ctx, w, err)
		return
	}
	h.reply(ctx, w, t, events)
}

// turn is one create request on its way: the decoded body, the history it
// continues and the response being built.
type turn struct {
	d       *decoded
	history []chat.Message // stored transcript before this input (no instructions)
	chain   []string       // ids of the records history was read from, oldest first
	resp    *responseObject
	owner   string
}

// prepare decodes the body, loads the conversation it continues and builds
// the neutral request: instructions, history, then this turn's input.
func (h *Handler) prepare(ctx context.Context, r *http.Request) (*turn, error) {
	body, err := httpx.ReadBody(r)
	if err != nil {
		return nil, err
	}
	d, err := decodeCreate(body)
	if err != nil {
		return nil, err
	}
	d.dropped.Report(ctx, h.log, h.cfg.CountDropped, protocol)
	if d.chat.AffinityHint == "" {
		// Codex names its conversation in a header too.
		if s := r.Header.Get("Session-Id"); s != "" && len(s) <= 128 {
			d.chat.AffinityHint = s
		}
	}
	t := &turn{d: d, owner: ownerOf(httpx.APIKey(ctx))}
	model := d.wire.Model
	if prev := d.wire.PreviousResponseID; prev != "" {
		rec, err := h.load(ctx, prev, t.owner)
		if err == nil {
			t.history, t.chain, err = h.history(ctx, prev, rec, t.owner)
		}
		if isNotFound(err) {
			return nil, notFound("previous_response_id", prev)
		}
		if err != nil {
			return nil, err
		}
		if model == "" {
			model = rec.Model
		}
	}
	nameToolResults(t.history, d.input)
	c := &d.chat
	c.Model = model
	c.RequestID = httpx.RequestID(ctx)
	c.APIKey = httpx.APIKey(ctx)
	msgs := make([]chat.Message, 0, 1+len(t.history)+len(d.input))
	if d.wire.Instructions != nil && *d.wire.Instructions != "" {
		msgs = append(msgs, chat.Message{Role: chat.RoleSystem, Content: *d.wire.Instructions})
	}
	c.Messages = append(append(msgs, t.history...), d.input...)
	t.resp = newResponse(d, model, d.wire.PreviousResponseID, h.now().Unix())
	return t, nil
}

// failBeforeStart answers a failure that came before any byte was sent,
// unless the client itself went away.
func (h *Handler) failBeforeStart(ctx context.Context, w http.ResponseWriter, err error) {
	if ctx.Err() == context.Canceled && !errors.Is(err, httpx.ErrBodyTimeout) {
		return
	}
	if mapError(err).status >= 500 {
		h.log.LogAttrs(ctx, slog.LevelWarn, "responses: request failed",
			slog.String("request_id", httpx.RequestID(ctx)), slog.Any("err", err))
	}
	writeMapped(w, err)
}

// next receives one event, sending keep-alive comments on tick (nil before
// a stream starts). A stream that ends without a closing event is an error.
func next(ctx context.Context, events <-chan chat.Event, tick <-chan time.Time, sse *httpx.SSE) (chat.Event, error) {
	for {
		select {
		case ev, ok := <-events:
			switch {
			case !ok && ctx.Err() != nil:
				return ev, ctx.Err()
			case !ok, ev.Type == chat.EventError && ev.Err == nil:
				return ev, chat.ErrWorkerGone
			case ev.Type == chat.EventError:
				return ev, ev.Err
			}
			return ev, nil
		case <-tick:
			if err := sse.Comment("keep-alive"); err != nil {
				return chat.Event{}, err
			}
		case <-ctx.Done():
			return chat.Event{}, ctx.Err()
		}
	}
}

// discard is an eventWriter for the non-streaming path, which folds events
// with the same encoder so both paths build the same object.
type discard struct{}

func (discard) Event(string, []byte) error { return nil }

// reply buffers the whole answer and writes the response object.
func (h *Handler) reply(ctx context.Context, w http.ResponseWriter, t *turn, events <-chan chat.Event) {
	enc := newStreamEncoder(discard{}, t.resp, t.d.refs)
	for {
		ev, err := next(ctx, events, nil, nil)
		if err != nil {
			h.failBeforeStart(ctx, w, err)
			return
		}
		var obj []byte
		switch ev.Type {
		case chat.EventText:
			err = enc.text(ev.Text)
		case chat.EventToolCall:
			err = enc.toolCall(&ev.ToolCall)
		case chat.EventDone:
			if obj, err = enc.done(&ev); err == nil {
				h.save(ctx, t, enc, obj)
				writeJSON(w, http.StatusOK, obj)
				return
			}
		}
		if err != nil {
			h.failBeforeStart(ctx, w, err)
			return
		}
	}
}

// stream writes the answer as SSE. Headers go out only with the first
// upstream event, so an error before it is still a JSON error; but when the
// answer takes longer than a keep-alive interval to start (a wait in the
// queue, an answer held back until it is clear it is not a tool call), the
// stream opens early with response.created, as OpenAI's own API does, and
// keeps alive with comments. After that the stream always ends with exactly
// one terminal event.
func (h *Handler) stream(ctx context.Context, cancel context.CancelFunc, w http.ResponseWriter, t *turn) {
	sse := httpx.NewSSE(w)
	enc := newStreamEncoder(sse, t.resp, t.d.refs)
	events, err := httpx.Await(h.cfg.KeepAlive, cancel,
		func() (<-chan chat.Event, error) { return h.chat.Chat(ctx, &t.d.chat) },
		func() error {
			switch {
			case !httpx.Claim(ctx, httpx.Local):
				return nil // another replica is answering
			case !sse.Started():
				return enc.start()
			}
			return sse.Comment("keep-alive")
		})
	if errors.Is(err, pool.ErrForwarded) {
		return // another replica answered
	}
	var ev chat.Event
	if err == nil {
		ev, err = next(ctx, events, nil, nil)
	}
	if err != nil && !sse.Started() {
		h.failBeforeStart(ctx, w, err)
		return
	}
	var tick <-chan time.Time
	if h.cfg.KeepAlive > 0 {
		tk := time.NewTicker(h.cfg.KeepAlive)
		defer tk.Stop()
		tick = tk.C
	}
	if err == nil && !sse.Started() {
		err = enc.start()
	}
	for err == nil {
		switch ev.Type {
		case chat.EventText:
			err = enc.text(ev.Text)
		case chat.EventToolCall:
			err = enc.toolCall(&ev.ToolCall)
		case chat.EventDone:
			// A failed write of the last event still leaves a finished answer
			// worth storing; obj is nil only when nothing final was built.
			obj, _ := enc.done(&ev)
			h.save(ctx, t, enc, obj)
			return
		}
		if err == nil {
			ev, err = next(ctx, events, tick, sse)
		}
	}
	// The worker failed, the request ended or the client stopped reading:
	// close with response.failed (best effort; the client may be gone).
	if ctx.Err() != context.Canceled {
		h.log.LogAttrs(ctx, slog.LevelWarn, "responses: stream failed mid-way",
			slog.String("request_id", httpx.RequestID(ctx)), slog.Any("err", err))
	}
	obj, _ := enc.failed(err)
	h.save(ctx, t, enc, obj)
}
