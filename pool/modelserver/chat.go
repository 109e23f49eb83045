package modelserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
)

// drainWait bounds reading the end of a finished stream (after [DONE]) so
// its connection can be reused; a server that holds it open longer loses it.
const drainWait = 200 * time.Millisecond

// Chat posts the turn to /v1/chat/completions, streamed, with the whole
// transcript (t.SessionID is ignored: these servers keep no sessions). Errors
// before the answer's first byte are returned: a connection failure wraps
// chat.ErrWorkerGone, a 429 is a *chat.RateLimitedError and any other status a
// *chat.UpstreamError. Otherwise a goroutine owns the returned channel and
// closes it after EventDone or EventError, or as soon as ctx ends. The turn
// is bounded by RequestTimeout.
func (c *Client) Chat(ctx context.Context, t *chat.Turn) (<-chan chat.Event, error) {
	if !c.begin() {
		return nil, fmt.Errorf("openai %s: chat: client closed: %w", c.name, chat.ErrWorkerGone)
	}
	p, err := c.d.encode(t)
	if err != nil {
		c.turns.Done()
		return nil, fmt.Errorf("openai %s: encode request: %w", c.name, err)
	}
	rctx, cancel := context.WithTimeout(ctx, c.d.cfg.RequestTimeout)
	unhook := context.AfterFunc(c.ctx, cancel) // Close aborts the turn
	end := func() {
		unhook()
		cancel()
		p.release()
		c.turns.Done()
	}
	resp, err := c.post(rctx, p)
	if err != nil {
		err = c.chatError(ctx, rctx, err)
		end()
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		err = statusError(resp, nil)
		_ = resp.Body.Close()
		end()
		return nil, err
	}
	out := make(chan chat.Event, 16)
	go func() {
		defer end()
		defer close(out)
		s := &stream{c: c, ctx: ctx, rctx: rctx, out: out}
		s.emit = s.send
		s.run(resp, cancel)
	}()
	return out, nil
}

// post sends the request; its body is the pooled payload, replayable for the
// transport's retry on a stale keep-alive connection.
func (c *Client) post(ctx context.Context, p *payload) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.chatURL, p.body())
	if err != nil {
		return nil, err
	}
	req.ContentLength = int64(p.buf.Len())
	req.GetBody = func() (io.ReadCloser, error) { return p.body(), nil }
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream, application/json")
	c.setAuth(req.Header)
	return c.d.hc.Do(req)
}

// stream is one answer being read.
type stream struct {
	c    *Client
	ctx  context.Context // the caller's: when it ends nobody listens
	rctx context.Context // the request's: adds RequestTimeout and Close
	out  chan<- chat.Event
	// emit delivers an event; false when the listener is gone. It is s.send,
	// or a collector in tests.
	emit func(chat.Event) bool
	acc  accumulator
}

// send delivers ev, giving up when the caller's context ends or the client
// is closed (then a full channel would block Close forever).
func (s *stream) send(ev chat.Event) bool {
	select {
	case s.out <- ev:
		return true
	default:
	}
	select {
	case s.out <- ev:
		return true
	case <-s.ctx.Done():
	case <-s.c.ctx.Done():
	}
	return false
}

// run reads the answer and emits its events; cancel aborts the request.
func (s *stream) run(resp *http.Response, cancel context.CancelFunc) {
	defer resp.Body.Close()
	r := s.c.d.readers.Get().(*sseReader)
	r.reset(resp.Body)
	defer func() {
		r.reset(nil)
		s.c.d.readers.Put(r)
	}()
	var err error
	if isJSONBody(resp.Header.Get("Content-Type"), r) {
		err = s.acc.whole(r, s.emit)
	} else {
		err = s.acc.sse(r, s.emit)
	}
	if errors.Is(err, errListenerGone) || s.ctx.Err() != nil {
		return // nobody listens any more
	}
	if err == nil && s.acc.sawDone {
		// Read the end of the body so the connection is reused; a server
		// that holds it open past drainWait has it dropped instead.
		t := time.AfterFunc(drainWait, cancel)
		_, _ = io.Copy(io.Discard, io.LimitReader(r.r, 64<<10))
		t.Stop()
	}
	if err != nil {
		s.emit(chat.Event{Type: chat.EventError, Err: s.readError(err)})
		return
	}
	s.finish()
}

// finish emits the accumulated tool calls and the closing event.
func (s *stream) finish() {
	calls, err := s.acc.toolCalls()
	if err != nil {
		s.emit(chat.Event{Type: chat.EventError, Err: err})
		return
	}
	for _, tc := range calls {
		if !s.emit(chat.Event{Type: chat.EventToolCall, ToolCall: tc}) {
			return
		}
	}
	s.emit(chat.Event{Type: chat.EventDone, Finish: s.acc.finishReason(), Usage: s.acc.usage})
}

// readError maps a failure while reading the answer to the pool's errors:
// the upstream's own errors pass through, a lost connection, a timeout or a
// stream cut short wrap chat.ErrWorkerGone.
func (s *stream) readError(err error) error {
	var up *chat.UpstreamError
	var rl *chat.RateLimitedError
	switch {
	case errors.As(err, &up), errors.As(err, &rl):
		return err
	case errors.Is(err, errTruncated):
		return fmt.Errorf("openai %s: %w: %w", s.c.name, err, chat.ErrWorkerGone)
	case s.c.ctx.Err() != nil:
		return fmt.Errorf("openai %s: client closed mid-answer: %w", s.c.name, chat.ErrWorkerGone)
	case s.ctx.Err() == nil && errors.Is(s.rctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("openai %s: answer not complete within %s: %w", s.c.name, s.c.d.cfg.RequestTimeout, chat.ErrWorkerGone)
	}
	return fmt.Errorf("openai %s: read answer: %w: %w", s.c.name, chat.ErrWorkerGone, err)
}

// isJSONBody says whether the answer is one JSON completion rather than an
// event stream: by its content type, else by its first byte, for servers
// that ignore stream:true or mislabel their streams.
func isJSONBody(contentType string, r *sseReader) bool {
	if mt, _, _ := mime.ParseMediaType(contentType); mt == "text/event-stream" {
		return false
	}
	return r.firstByte() == '{'
}
