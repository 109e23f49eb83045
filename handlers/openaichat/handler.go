// Package openaichat serves OpenAI's POST /v1/chat/completions. It sits
// between the gin router (which adds request ids, auth and the body cap) and
// pool's router: it decodes the wire JSON into a neutral chat.Request,
// calls the router, and writes the neutral events back as one
// chat.completion body or as a chat.completion.chunk SSE stream. It imports
// no web framework.
//
// Stream framing: the SSE headers go out with the first event (or the first
// keep-alive), so a failure before that is a JSON error with its real status.
// A failure after it is one data frame holding {"error":{...}} (the shape of
// an error body, which OpenAI's SDKs raise as an error), and the stream then
// closes WITHOUT "data: [DONE]": [DONE] means the answer is complete, so a
// client that ignores the error frame still sees a truncated stream.
package openaichat

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool"
)

// Chatter is what the handler needs of pool's router. An error from Chat
// happened before any event (and was already retried). Otherwise the channel
// yields EventText and EventToolCall events, ends with exactly one EventDone
// or EventError and is then closed; the router has already applied Stop and
// MaxTokens.
type Chatter interface {
	Chat(ctx context.Context, req *chat.Request) (<-chan chat.Event, error)
}

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
}

// protocol is this package's label in metrics and logs.
const protocol = "chat"

// Handler serves chat completions. It is safe for concurrent use.
type Handler struct {
	cfg  Config
	chat Chatter
	log  *slog.Logger
	// now and newID are replaced by tests for stable transcripts.
	now   func() time.Time
	newID func(prefix string) string
}

// New returns a handler that answers with chat. A nil log discards logs.
func New(cfg Config, chat Chatter, log *slog.Logger) *Handler {
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = 15 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Handler{cfg: cfg, chat: chat, log: log, now: time.Now, newID: randomID}
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

// Completions serves POST /v1/chat/completions.
func (h *Handler) Completions(w http.ResponseWriter, r *http.Request) {
	body, err := httpx.ReadBody(r)
	if err != nil && !errors.Is(err, httpx.ErrBodyTooLarge) && !errors.Is(err, httpx.ErrBodyTimeout) {
		err = badRequest("", "", "read body: %v", err)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	req, opt, err := decodeRequest(body)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	opt.dropped.Report(r.Context(), h.log, h.cfg.CountDropped, protocol)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel() // ends the worker call if we stop reading early
	req.RequestID = httpx.RequestID(ctx)
	req.APIKey = httpx.APIKey(ctx)

	id, created := h.newID("chatcmpl-"), h.now().Unix()
	if opt.stream {
		st := &streamState{sse: httpx.NewSSE(w), enc: newStreamEncoder(id, req.Model, created, opt.includeUsage)}
		st.sse.WriteTimeout = h.cfg.WriteTimeout
		// A wait for the answer to start (in the queue, or while it is
		// held back until it is clear it is not a tool call) sends comments,
		// which commit the stream: a failure after one is an error chunk.
		events, err := httpx.Await(h.cfg.KeepAlive, cancel,
			func() (<-chan chat.Event, error) { return h.chat.Chat(ctx, req) },
			func() error {
				if !httpx.Claim(ctx, httpx.Local) {
					return nil // another replica is answering
				}
				return st.sse.Comment("keep-alive")
			})
		switch {
		case errors.Is(err, pool.ErrForwarded):
			return // another replica answered
		case err != nil:
			_, _ = h.streamEvent(w, r, st, chat.Event{Type: chat.EventError, Err: err})
			return
		}
		h.stream(ctx, w, r, events, st)
		return
	}
	events, err := h.chat.Chat(ctx, req)
	if errors.Is(err, pool.ErrForwarded) {
		return // another replica answered
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.collect(ctx, w, r, events, &completion{ID: id, Object: "chat.completion", Created: created, Model: req.Model})
}

// fail answers with the JSON error for err, unless the client is gone.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	ae := ErrorFor(err)
	// A body that did not arrive in time cancels the request too, but its
	// client still waits for the 408.
	if clientGone(r) && !errors.Is(err, httpx.ErrBodyTimeout) {
		h.log.Debug("chat completion abandoned by client", "request_id", httpx.RequestID(r.Context()), "err", err)
		return
	}
	h.logError(r, err, ae, false)
	ae.Write(w)
}

// clientGone reports whether the client cancelled the request, so there is
// nobody to answer. A deadline is not that: the client still waits for a 504.
func clientGone(r *http.Request) bool {
	return errors.Is(r.Context().Err(), context.Canceled)
}

func (h *Handler) logError(r *http.Request, err error, ae *APIError, midStream bool) {
	level := slog.LevelDebug
	if ae.Status >= 500 {
		level = slog.LevelWarn
	}
	h.log.Log(r.Context(), level, "chat completion failed", "request_id", httpx.RequestID(r.Context()),
		"status", ae.Status, "mid_stream", midStream, "err", err)
}

// endedEarly is the error for a channel closed without a closing event.
func endedEarly(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return chat.ErrWorkerGone
}

// collect buffers the answer into one chat.completion body.
func (h *Handler) collect(ctx context.Context, w http.ResponseWriter, r *http.Request, events <-chan chat.Event, c *completion) {
	var text strings.Builder
	var calls []replyToolCall
	for ev := range events {
		switch ev.Type {
		case chat.EventText:
			text.WriteString(ev.Text)
		case chat.EventToolCall:
			calls = append(calls, h.replyCall(ev.ToolCall))
		case chat.EventError:
			h.fail(w, r, ev.Err)
			return
		case chat.EventDone:
			msg := replyMessage{Role: "assistant", ToolCalls: calls}
			if s := text.String(); s != "" || len(calls) == 0 {
				msg.Content = &s
			}
			c.Choices = []choice{{Message: msg, FinishReason: finishReason(ev.Finish, len(calls) > 0)}}
			c.Usage = usageOf(ev.Usage)
			h.writeJSON(w, r, c)
			return
		}
	}
	h.fail(w, r, endedEarly(ctx))
}

func (h *Handler) replyCall(tc chat.ToolCall) replyToolCall {
	id := tc.ID
	if id == "" {
		id = h.newID("call_")
	}
	args := tc.Arguments
	if args == "" {
		args = "{}"
	}
	return replyToolCall{ID: id, Type: "function", Function: wireFunction{Name: tc.Name, Arguments: args}}
}

func (h *Handler) writeJSON(w http.ResponseWriter, r *http.Request, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(b); err != nil {
		h.log.Debug("write chat completion", "request_id", httpx.RequestID(r.Context()), "err", err)
	}
}

// streamState is one stream in progress.
type streamState struct {
	sse    *httpx.SSE
	enc    *streamEncoder
	called bool // a tool call was sent
	begun  bool // the role chunk was sent
}

// stream relays events as chat.completion.chunk frames.
func (h *Handler) stream(ctx context.Context, w http.ResponseWriter, r *http.Request, events <-chan chat.Event, st *streamState) {
	var tick <-chan time.Time
	var timer *time.Timer
	if h.cfg.KeepAlive > 0 {
		timer = time.NewTimer(h.cfg.KeepAlive)
		defer timer.Stop()
		tick = timer.C
	}
	for {
		var err error
		select {
		case ev, ok := <-events:
			if !ok {
				ev = chat.Event{Type: chat.EventError, Err: endedEarly(ctx)}
			}
			var more bool
			if more, err = h.streamEvent(w, r, st, ev); err == nil && !more {
				return
			}
		case <-tick:
			err = st.sse.Comment("keep-alive")
		case <-ctx.Done():
			// A cancelled client is gone; a deadline still gets its error.
			_, err = h.streamEvent(w, r, st, chat.Event{Type: chat.EventError, Err: ctx.Err()})
			if err == nil {
				return
			}
		}
		if err != nil {
			h.log.Debug("chat stream write", "request_id", httpx.RequestID(ctx), "err", err)
			return
		}
		if timer != nil {
			// Since Go 1.23 Reset needs no drain of a fired timer.
			timer.Reset(h.cfg.KeepAlive)
		}
	}
}

// streamEvent writes one event; more is false once the stream is over.
func (h *Handler) streamEvent(w http.ResponseWriter, r *http.Request, st *streamState, ev chat.Event) (more bool, err error) {
	if ev.Type == chat.EventError && !st.sse.Started() {
		h.fail(w, r, ev.Err)
		return false, nil
	}
	if !st.begun && ev.Type != chat.EventError {
		st.begun = true
		if err := st.sse.Event("", st.enc.role()); err != nil {
			return false, err
		}
	}
	switch ev.Type {
	case chat.EventText:
		if ev.Text == "" {
			return true, nil
		}
		return true, st.sse.Event("", st.enc.text(ev.Text))
	case chat.EventToolCall:
		st.called = true
		tc := h.replyCall(ev.ToolCall)
		if err := st.sse.Event("", st.enc.toolCallHead(tc.ID, tc.Function.Name)); err != nil {
			return false, err
		}
		return true, st.sse.Event("", st.enc.toolCallArgs(tc.Function.Arguments))
	case chat.EventDone:
		return false, h.streamDone(st, ev)
	case chat.EventError:
		if clientGone(r) {
			return false, nil
		}
		ae := ErrorFor(ev.Err)
		h.logError(r, ev.Err, ae, true)
		return false, st.sse.Event("", st.enc.errorChunk(ae))
	}
	return true, nil
}

func (h *Handler) streamDone(st *streamState, ev chat.Event) error {
	if err := st.sse.Event("", st.enc.finish(finishReason(ev.Finish, st.called))); err != nil {
		return err
	}
	if st.enc.usage {
		if err := st.sse.Event("", st.enc.usageChunk(ev.Usage)); err != nil {
			return err
		}
	}
	return st.sse.Event("", doneData)
}
