// Package responses serves OpenAI's Responses API (POST /v1/responses and
// GET/DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items) on plain
// net/http. It decodes the wire JSON into a neutral chat.Request (with the
// stored conversation that previous_response_id continues), encodes the
// answer as a response object or as the Responses stream events, and keeps
// each stored response (with the neutral transcript behind it) in a Store.
// Opening the answer is the edge's; keep-alives, the stream's ending and
// the classification of errors are the relay's and apierr's; the error shape is
// openaierr's.
package responses

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/handlers/openaierr"
	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/internal/chat"
)

// Store keeps stored responses as opaque bytes. The session package's
// stores (memory and Redis) implement it through a small adapter where the
// daemon is wired; bounding what it keeps, in all and per
// owner, is its job, the TTL is given per call, and the responses in keep
// (the earlier links of a chain) must live as long as the one saved. Load
// and Delete return ErrNotFound (or an error wrapping it) for an unknown id.
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
	relay.Options
	// Shapes are another gateway's ways, kept for its clients (nil:
	// OpenAI's alone).
	Shapes Shapes
}

// protocol is this package's label in metrics and logs.
const protocol = "responses"

// Handler serves the Responses API. It is safe for concurrent use.
type Handler struct {
	relay.Codec
	cfg   Config
	store Store
	now   func() time.Time
}

var _ relay.Protocol = (*Handler)(nil)

// New returns a Handler that keeps responses in store. A nil log discards.
func New(cfg Config, store Store, log *slog.Logger) *Handler {
	if cfg.TTL == 0 {
		cfg.TTL = 24 * time.Hour
	}
	if cfg.StoreTimeout == 0 {
		cfg.StoreTimeout = 2 * time.Second
	}
	return &Handler{Codec: relay.NewCodec(relay.Config{Options: cfg.Options, Protocol: protocol, WriteError: openaierr.Write,
		Dropped: DroppedFields}, log), cfg: cfg, store: store, now: time.Now}
}

// Endpoints are the Responses API's: create (also without /v1, for
// clients whose base URL has none), the stored responses' retrieve, delete
// and input items, and remote compaction, which this gateway has not
// (relay.Protocol).
func (h *Handler) Endpoints() []relay.Endpoint {
	return []relay.Endpoint{{Method: http.MethodPost, Path: "/v1/responses", Serves: relay.ServeTurn},
		{Method: http.MethodPost, Path: "/responses", Serves: relay.ServeTurn},
		{Method: http.MethodPost, Path: "/v1/responses/compact", Serves: relay.ServePlain, Serve: unsupported},
		{Method: http.MethodGet, Path: "/v1/responses/:id", Serves: relay.ServePlain, Serve: h.Get},
		{Method: http.MethodDelete, Path: "/v1/responses/:id", Serves: relay.ServePlain, Serve: h.Delete},
		{Method: http.MethodGet, Path: "/v1/responses/:id/input_items", Serves: relay.ServePlain, Serve: h.InputItems}}
}

// Claims reports whether r is one of the Responses API's (relay.Protocol).
func (h *Handler) Claims(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, "/v1/responses") || r.URL.Path == "/responses"
}

// unsupported answers remote compaction, an OpenAI-only service: an
// encrypted summary only OpenAI's servers can read back. It is answered as
// OpenAI answers a route it does not have, so a client falls back to
// compacting with a plain turn.
func unsupported(w http.ResponseWriter, r *http.Request) {
	p := apierr.ForStatus(http.StatusNotFound, r.Method+" "+r.URL.Path+
		" is not supported by this gateway (its workers have no server-side compaction)")
	openaierr.Write(w, &p)
}

// Decode decodes a POST /v1/responses request into its turn, with the
// stored conversation it continues; the response is stored once its answer
// is over (relay.Protocol).
func (h *Handler) Decode(r *http.Request, body []byte) (*relay.Decoded, error) {
	ctx := r.Context()
	t, err := h.prepare(ctx, r, body)
	if err != nil {
		return nil, err
	}
	rt := &relay.Decoded{Request: &t.d.chat}
	if !t.d.chat.Stream {
		enc := newStreamEncoder(discard{}, t.resp, t.d.refs, endingOf(h.cfg.Shapes))
		rt.Body = &reply{enc: enc, h: h, ctx: ctx, t: t}
		return rt, nil
	}
	var enc *streamEncoder
	rt.Stream = func(sse *relay.SSE) relay.Encoder {
		enc = newStreamEncoder(sse, t.resp, t.d.refs, endingOf(h.cfg.Shapes))
		return enc
	}
	rt.Over = func(ctx context.Context, out relay.Outcome) { h.streamed(ctx, t, enc, out) }
	return rt, nil
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
func (h *Handler) prepare(ctx context.Context, r *http.Request, body []byte) (*turn, error) {
	d, err := decodeCreate(body, h.cfg.Shapes)
	if err != nil {
		return nil, err
	}
	h.Report(ctx, &d.dropped)
	if d.chat.AffinityHint == "" {
		// Codex names its conversation in a header too.
		if s := r.Header.Get("Session-Id"); s != "" && len(s) <= 128 {
			d.chat.AffinityHint = s
		}
	}
	t := &turn{d: d, owner: httpx.Owner(ctx).Responses}
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
	msgs := make([]chat.Message, 0, 1+len(t.history)+len(d.input))
	if d.wire.Instructions != nil && *d.wire.Instructions != "" {
		msgs = append(msgs, chat.Message{Role: chat.RoleSystem, Content: *d.wire.Instructions})
	}
	c.Messages = append(append(msgs, t.history...), d.input...)
	if err := apierr.Validate(c, d.param); err != nil {
		return nil, err
	}
	t.resp = newResponse(d, model, d.wire.PreviousResponseID, h.now().Unix())
	return t, nil
}

// discard is the event writer of the non-streaming path, which folds events
// with the stream encoder so both paths build the same object.
type discard struct{}

func (discard) Event(string, []byte) error { return nil }
func (discard) Comment(string) error       { return nil }

// reply folds a whole answer into the response object, stored before it is
// sent.
type reply struct {
	enc *streamEncoder
	h   *Handler
	ctx context.Context
	t   *turn
}

func (r *reply) Text(s string) error             { return r.enc.text(s) }
func (r *reply) ToolCall(tc chat.ToolCall) error { return r.enc.toolCall(&tc) }

func (r *reply) Body(done chat.Event) ([]byte, error) {
	obj, err := r.enc.done(&done)
	if err == nil {
		r.h.save(r.ctx, r.t, r.enc, obj)
	}
	return obj, err
}

// streamed stores a streamed response once it ended, completed or failed,
// even when the client has gone. When the answer takes longer than a
// keep-alive interval to start (a wait in the queue, an answer held back
// until it is clear it is not a tool call), the stream opens early with
// response.created, as OpenAI's own API does.
func (h *Handler) streamed(ctx context.Context, t *turn, enc *streamEncoder, out relay.Outcome) {
	switch {
	case out.Forwarded, out.Err != nil && !out.Started:
		return // another replica answered, or a JSON error did
	case out.Err != nil && enc.final == nil:
		// The stream ended without response.failed (the client went away):
		// the stored response says how it ended all the same.
		p := apierr.Classify(out.Err)
		enc.final = enc.failedObject(&p)
	}
	h.save(ctx, t, enc, enc.final)
}
