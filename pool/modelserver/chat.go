package modelserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
)

// drainWait bounds reading the end of a finished stream (after [DONE]) so
// its connection can be reused; a server that holds it open longer loses it.
const drainWait = 200 * time.Millisecond

// Start posts the turn to /v1/chat/completions, streamed (or, for a Whole
// turn, as one body), with the whole transcript (t.SessionID is ignored:
// these servers keep no sessions), and returns its answer, which the
// caller reads on its own goroutine. Errors before the answer's first byte
// are returned: a connection failure wraps chat.ErrWorkerGone, a 429 is a
// *chat.RateLimitedError and any other status a *chat.UpstreamError. The
// turn is bounded by RequestTimeout.
func (c *Client) Start(ctx context.Context, t *chat.Turn) (chat.Answer, error) {
	a, err := c.open(ctx, t)
	if err != nil {
		return nil, err
	}
	return a, nil
}

// open sends the turn and returns its answer, ready to be read.
func (c *Client) open(ctx context.Context, t *chat.Turn) (*reader, error) {
	if !c.begin() {
		return nil, fmt.Errorf("openai %s: chat: client closed: %w: %w", c.name, chat.ErrWorkerGone, chat.ErrNotSent)
	}
	if err := c.d.CheckTurn(t); err != nil {
		return nil, fmt.Errorf("openai %s: %w", c.name, err) // before the request is encoded
	}
	p, err := c.d.encode(t, c.head)
	if err != nil {
		return nil, fmt.Errorf("openai %s: encode request: %w", c.name, err)
	}
	if n := int64(p.buf.Len()); n > c.d.cfg.MaxRequest {
		c.d.release(p)
		return nil, fmt.Errorf("openai %s: %w", c.name, &chat.TooLargeError{Size: n, Limit: c.d.cfg.MaxRequest})
	}
	// The turn's deadline lives on its connection: no timer or context of
	// its own.
	deadline := time.Now().Add(c.d.cfg.RequestTimeout)
	a := &reader{stream: stream{c: c, ctx: ctx, deadline: deadline}}
	resp, w, err := c.exchange(ctx, p, deadline)
	c.d.release(p)
	if err != nil {
		return nil, c.chatError(ctx, err)
	}
	a.attach(resp, w)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		err = statusError(resp, nil)
		a.closeBody()
		return nil, err
	}
	return a, nil
}

// attach starts reading the answer resp from the connection w.
func (a *reader) attach(resp *http.Response, w *wconn) {
	a.resp, a.w = resp, w
	a.r = a.c.d.readers.Get().(*sseReader)
	a.r.reset(resp.Body)
	a.emit = a.queue
}

// stream is one answer being read.
type stream struct {
	c   *Client
	ctx context.Context // the caller's: when it ends nobody listens
	// deadline ends the turn (RequestTimeout after it began).
	deadline time.Time
	// emit delivers an event; false when the listener is gone.
	emit func(chat.Event) bool
	acc  accumulator
}

// reader is one turn's answer, read event by event by the router.
type reader struct {
	stream
	resp   *http.Response
	w      *wconn // the connection the answer is read from
	r      *sseReader
	events chat.Queue // parsed and not yet returned
	// json is set once the body turned out to be one JSON answer; started
	// once that was looked at; ended once the closing event is queued.
	json, started, ended bool
	closed               bool
}

var _ chat.Answer = (*reader)(nil)

// Next returns the answer's next event; false after the closing event
// (EventDone or EventError).
func (a *reader) Next() (chat.Event, bool) { return a.events.Next(&a.ended, a.step) }

// Buffered says whether an event is at hand. Whole stream events already
// read from the connection are parsed to find out, never waiting for more.
func (a *reader) Buffered() bool {
	for a.events.Len() == 0 && a.started && !a.ended && !a.json && a.r != nil && a.r.eventBuffered() {
		a.step()
	}
	return a.events.Len() > 0
}

// Close ends the turn and frees its connection; safe to call twice, and
// before the answer's end (which aborts the request).
func (a *reader) Close() {
	if a.closed {
		return
	}
	a.closeBody()
	a.closed = true
}

// queue is the accumulator's emit: events wait for next.
func (a *reader) queue(ev chat.Event) bool {
	a.events.Push(ev)
	return true
}

// step reads one event of a stream (or a whole body) and queues what it
// yields; at the end it queues the closing event.
func (a *reader) step() {
	if !a.started {
		a.started = true
		a.json = isJSONBody(a.resp.Header.Get("Content-Type"), a.r)
	}
	var err error
	if a.json {
		err = a.acc.whole(a.r, a.emit)
	} else {
		data, isErr, rerr := a.r.next()
		switch {
		case rerr == io.EOF:
			if !a.acc.sawFinish {
				err = errTruncated
			}
		case rerr != nil:
			err = rerr
		default:
			var end bool
			if end, err = a.acc.payload(a.r, data, isErr, a.emit); !end && err == nil {
				return
			}
		}
	}
	a.ended = true
	a.end(err)
}

// end queues the answer's closing events after the stream ended with err.
func (a *reader) end(err error) {
	if errors.Is(err, errListenerGone) {
		return // nobody listens any more
	}
	if err != nil && a.ctx.Err() != nil {
		// The caller gave up (its context ended, which aborted the read):
		// the answer ends with the context's error.
		a.emit(chat.Event{Type: chat.EventError, Err: fmt.Errorf("openai %s: chat: %w", a.c.name, a.ctx.Err())})
		return
	}
	if err == nil && a.acc.sawDone {
		// Read the end of the body so the connection is reused; a server
		// that holds it open past drainWait has it dropped instead.
		if a.w.setReadDeadline(time.Now().Add(drainWait)) == nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(a.r.r, 64<<10))
		}
	}
	if err != nil {
		a.emit(chat.Event{Type: chat.EventError, Err: a.readError(err)})
		return
	}
	a.finish()
}

// closeBody ends the exchange, which puts its connection back in the pool
// when the answer was read to its end, and returns the reader to its pool.
func (a *reader) closeBody() {
	if a.resp == nil {
		return
	}
	a.w.finish(a.resp)
	a.r.reset(nil)
	a.c.d.readers.Put(a.r)
	a.resp, a.w, a.r = nil, nil, nil
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
	case s.ctx.Err() == nil && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(s.deadline):
		return fmt.Errorf("openai %s: answer not complete within %s: %w", s.c.name, s.c.d.cfg.RequestTimeout, chat.ErrWorkerGone)
	}
	return fmt.Errorf("openai %s: read answer: %w: %w", s.c.name, chat.ErrWorkerGone, err)
}

// isJSONBody says whether the answer is one JSON completion rather than an
// event stream: by its content type, else by its first byte, for servers
// that ignore stream:true or mislabel their streams.
func isJSONBody(contentType string, r *sseReader) bool {
	switch {
	case contentType == "text/event-stream", strings.HasPrefix(contentType, "text/event-stream;"):
		return false // the usual spellings, without parsing
	case strings.HasPrefix(contentType, "application/json"):
	default:
		if mt, _, _ := mime.ParseMediaType(contentType); mt == "text/event-stream" {
			return false
		}
	}
	return r.firstByte() == '{'
}
