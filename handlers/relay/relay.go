// Package relay carries answers from the pool to the client, the same way
// for every protocol. It reads the answer (a chat.Answer) from the Pool the
// edge hands each request, on the request's own goroutine. It owns the SSE
// stream (headers, framing, flushing and the write deadline), opening a
// stream early when the answer is slow to start, keep-alives while a stream
// is quiet, the hop to the replica that holds the turn (while the response
// is untouched), the ending of a complete or a failed answer, a client that
// went away, and the non-stream path that collects the whole answer before
// it is encoded. Errors are classified by apierr. A protocol supplies only
// its encoders (Stream, Reply) and the writer of its JSON error body. The
// relay knows neither the router nor the cluster.
package relay

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/internal/chat"
)

// Pool is the way to one request's answer. The HTTP edge builds one for
// each request, over the router and the cluster; the relay knows neither.
type Pool interface {
	// Open runs req on the pool and returns its answer once it has started
	// (it has already applied Stop and MaxTokens). An error happened before
	// any event, and was already retried. When mayHop and the turn belongs
	// to another replica, Open returns no answer and that replica's URL,
	// having admitted nothing here.
	Open(ctx context.Context, req *chat.Request, mayHop bool) (ans chat.Answer, holder string, err error)
	// Hop carries the request to the replica at holder and copies its
	// answer to the client. An error means nothing was written: the
	// request is then served here.
	Hop(ctx context.Context, holder string) error
	// Instance names the instance that took the turn, "" before one did
	// (the Python gateway's served_by).
	Instance() string
}

// Call is one request as the edge hands it to a protocol: its body, read
// once (and kept for a hop to another replica), and the pool that answers
// it.
type Call struct {
	Body []byte
	Pool Pool
}

// Stream is a protocol's encoder of a streamed answer. A method's error
// means the client can no longer be written to.
type Stream interface {
	// Open writes what the protocol sends before an answer's first event
	// (it may write nothing). The relay calls it once: with the first event,
	// or when the wait for it outlasts the keep-alive interval.
	Open() error
	Text(s string) error
	ToolCall(tc chat.ToolCall) error
	// Done writes the ending of a complete answer.
	Done(ev chat.Event) error
	// Fail writes the ending of an answer that failed once the stream had
	// started.
	Fail(p *apierr.Problem) error
	// KeepAlive writes what keeps a quiet stream open (a comment or a ping).
	KeepAlive() error
}

// Reply is a protocol's encoder of a whole answer as one JSON body.
type Reply interface {
	Text(s string) error
	ToolCall(tc chat.ToolCall) error
	// Body is the answer's JSON, given its closing event.
	Body(done chat.Event) ([]byte, error)
}

// Answer folds the text and tool calls of a whole answer, for a Reply whose
// body holds the text before the calls.
type Answer struct {
	text  strings.Builder
	Calls []chat.ToolCall
}

// Text adds a piece of text.
func (a *Answer) Text(s string) error {
	a.text.WriteString(s)
	return nil
}

// ToolCall adds a call.
func (a *Answer) ToolCall(tc chat.ToolCall) error {
	a.Calls = append(a.Calls, tc)
	return nil
}

// Content is the text so far.
func (a *Answer) Content() string { return a.text.String() }

// Outcome is how a request a protocol served ended.
type Outcome struct {
	// Err is nil when the answer completed, else what ended it.
	Err error
	// Told is the error told to the caller ("" when none), for the
	// request log.
	Told string
	// Started says whether the stream had started (so a failure was told
	// in-stream, if at all).
	Started bool
	// Forwarded says another replica answered; nothing was written here.
	Forwarded bool
}

// Config tunes a Relay. The zero value is usable, except that WriteError
// is required.
type Config struct {
	// Protocol names the protocol in logs ("chat", "responses", "messages").
	Protocol string
	// KeepAlive is how long a stream may stay quiet (or an answer take to
	// start) before a keep-alive goes out; the first one opens the stream, so
	// a failure after it is told in-stream. Default 15s; negative disables.
	KeepAlive time.Duration
	// WriteTimeout bounds each write and flush of a stream, so a client
	// that stops reading cannot hold the worker. Default 30s.
	WriteTimeout time.Duration
	// WriteError writes a problem as the protocol's JSON error body, with
	// its status.
	WriteError func(w http.ResponseWriter, p *apierr.Problem)
}

// Relay relays answers of one protocol. It is safe for concurrent use.
type Relay struct {
	cfg Config
	log *slog.Logger
}

// New returns a relay. A nil log discards.
func New(cfg Config, log *slog.Logger) *Relay {
	if cfg.KeepAlive == 0 {
		cfg.KeepAlive = 15 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 30 * time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Relay{cfg: cfg, log: log}
}

// NewSSE returns the event stream a Stream encoder writes to on w.
func (rl *Relay) NewSSE(w http.ResponseWriter) *SSE {
	s := newSSE(w)
	s.WriteTimeout = rl.cfg.WriteTimeout
	return s
}

// NewRaw returns a stream like NewSSE's for a protocol that frames its
// stream itself (SSE.Raw), sent as contentType.
func (rl *Relay) NewRaw(w http.ResponseWriter, contentType string) *SSE {
	s := rl.NewSSE(w)
	s.contentType = contentType
	return s
}

// Fail answers err before anything else was sent: the protocol's JSON error
// with its status, or, when the client has gone, only the status 499 for
// the logs.
func (rl *Relay) Fail(ctx context.Context, w http.ResponseWriter, err error) Outcome {
	if apierr.Gone(ctx, err) {
		rl.log.LogAttrs(ctx, slog.LevelDebug, "request abandoned by the client", slog.String("protocol", rl.cfg.Protocol),
			slog.String("request_id", httpx.RequestID(ctx)), slog.Any("err", err))
		w.WriteHeader(apierr.StatusClientClosed)
		return Outcome{Err: err, Told: ClientGone}
	}
	p := apierr.Classify(err)
	rl.logFailure(ctx, &p, false)
	rl.cfg.WriteError(w, &p)
	return Outcome{Err: err, Told: p.Message}
}

// ClientGone is the request log's error for a request its client left.
const ClientGone = "the client closed the request"

func (rl *Relay) logFailure(ctx context.Context, p *apierr.Problem, midStream bool) {
	level := slog.LevelDebug
	if p.Status >= 500 {
		level = slog.LevelWarn
	}
	rl.log.LogAttrs(ctx, level, "request failed", slog.String("protocol", rl.cfg.Protocol),
		slog.String("request_id", httpx.RequestID(ctx)), slog.Int("status", p.Status),
		slog.Bool("mid_stream", midStream), slog.Any("err", p.Err))
}

// open asks p for req's answer. When the turn is another replica's, hop
// carries the request there and says whether it did (it may not, once the
// response has started); if not, the turn is served here.
func (rl *Relay) open(ctx context.Context, p Pool, req *chat.Request, hop func(holder string) bool) (chat.Answer, bool, error) {
	ans, holder, err := p.Open(ctx, req, true)
	if holder == "" {
		return ans, false, err
	}
	if hop(holder) {
		return nil, true, nil
	}
	ans, _, err = p.Open(ctx, req, false)
	return ans, false, err
}

// hop carries the request to holder; false (logged) when it could not.
func (rl *Relay) hop(ctx context.Context, p Pool, holder string) bool {
	err := p.Hop(ctx, holder)
	if err != nil {
		rl.log.LogAttrs(ctx, slog.LevelWarn, "hop to the replica that holds the turn failed, serving here",
			slog.String("holder", holder), slog.String("request_id", httpx.RequestID(ctx)), slog.Any("err", err))
	}
	return err == nil
}

// Reply answers req with one JSON body: the whole answer is collected into
// reply, then encoded. Any failure is a JSON error with its status.
func (rl *Relay) Reply(ctx context.Context, w http.ResponseWriter, p Pool, req *chat.Request, reply Reply) Outcome {
	// Nothing is written before the whole answer: the hop can always be
	// tried.
	events, hopped, err := rl.open(ctx, p, req, func(holder string) bool { return rl.hop(ctx, p, holder) })
	if hopped {
		return Outcome{Forwarded: true}
	}
	if err == nil {
		defer events.Close()
	}
	for err == nil {
		// The answer ends when ctx does, so this wait needs no select of
		// its own (which would cost every request the context's done
		// channel).
		ev, ok := events.Next()
		if ev, err = received(ctx, ev, ok); err != nil {
			break
		}
		switch ev.Type {
		case chat.EventText:
			err = reply.Text(ev.Text)
		case chat.EventToolCall:
			err = reply.ToolCall(ev.ToolCall)
		case chat.EventDone:
			var body []byte
			if body, err = reply.Body(ev); err == nil {
				httpx.WriteJSON(w, http.StatusOK, body)
				return Outcome{}
			}
		}
	}
	return rl.Fail(ctx, w, err)
}

// received checks one event. A stream that ends without a closing event (the
// router gave up, ctx ended) is an error, and so is its closing error event.
func received(ctx context.Context, ev chat.Event, ok bool) (chat.Event, error) {
	switch {
	case !ok && ctx.Err() != nil:
		return ev, ctx.Err()
	case !ok, ev.Type == chat.EventError && ev.Err == nil:
		return ev, chat.ErrWorkerGone
	case ev.Type == chat.EventError:
		return ev, ev.Err
	}
	return ev, nil
}

// Stream relays a streamed answer to req, from p, through enc, which writes on sse
// (from rl.NewSSE). Headers go out with the first thing written, so a failure
// before it is a JSON error with its status; after it, the failure is told
// through enc.Fail. A stream that started ends with exactly one Done or
// Fail, unless the client went away. cancel ends the request's context: the
// relay calls it when the client stops reading.
func (rl *Relay) Stream(ctx context.Context, cancel context.CancelFunc, sse *SSE, p Pool, req *chat.Request, enc Stream) Outcome {
	s := &streamer{rl: rl, ctx: ctx, cancel: cancel, sse: sse, enc: enc}
	// One timer writes the keep-alives, from the request's start to its
	// end, whenever nothing was written for a whole interval: a long wait
	// in the queue, an answer held back until it is clear whether it is a
	// tool call, or a quiet stream must not look like a dead connection to
	// the client or a proxy. Its first keep-alive commits the stream
	// (headers and the protocol's opening), so an error after it is an
	// in-stream error. s.mu keeps its writes apart from the relay's.
	if every := rl.cfg.KeepAlive; every > 0 {
		s.mu.Lock()
		s.lastWrite = time.Now()
		s.timer = time.AfterFunc(every, func() { s.tick(every) })
		s.mu.Unlock()
		defer s.stopTicks()
	}
	// The pool's Open returns once the answer has started; it runs on
	// this goroutine, and so does the reading of the answer.
	events, hopped, err := rl.open(ctx, p, req, func(holder string) bool { return s.hop(p, holder) })
	if hopped {
		return Outcome{Forwarded: true}
	}
	if events != nil {
		defer events.Close()
	}
	s.mu.Lock()
	s.lastWrite = time.Now()
	if s.tickErr != nil {
		err = s.tickErr // the client went away while the answer was awaited
	}
	if err != nil {
		s.over = true // no keep-alive after the error's answer
	}
	s.mu.Unlock()
	if err != nil {
		return s.fail(err)
	}
	for {
		ev, ok := events.Next()
		s.mu.Lock()
		out, end := s.relay(events, ev, ok)
		if end {
			s.over = true
		}
		s.mu.Unlock()
		if end {
			return out
		}
	}
}

// relay writes one event read from the answer (ok false: it is over) and
// says whether the stream ended, and how. Called with s.mu held.
func (s *streamer) relay(events chat.Answer, ev chat.Event, ok bool) (Outcome, bool) {
	if s.tickErr != nil {
		return s.writeFailed(s.tickErr), true
	}
	ev, err := received(s.ctx, ev, ok)
	if err != nil {
		s.sse.Hold(false)
		return s.fail(err), true
	}
	// Another event already at hand: leave this one in the buffer for the
	// write of the last of them. Not the answer's first: the client sees it
	// at once, however fast the rest follows.
	s.sse.Hold(s.flowing && (ev.Type == chat.EventText || ev.Type == chat.EventToolCall) && events.Buffered())
	done, werr := s.write(ev)
	s.lastWrite = time.Now()
	switch {
	case done:
		return Outcome{Started: s.sse.Started()}, true
	case werr != nil:
		s.cancel() // the client stopped reading: end the worker's turn
		return s.writeFailed(werr), true
	}
	return Outcome{}, false
}

// tick is the keep-alive timer's: it writes a keep-alive when nothing was
// written for a whole interval. The timer, armed for a whole interval, is
// moved on when it fires early rather than on every event. A failed write
// cancels the request, which ends the answer, awaited or being read. While
// another replica's answer is being copied here (a hop), the keep-alives
// pause.
func (s *streamer) tick(every time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.over || s.tickErr != nil {
		return
	}
	if quiet := time.Since(s.lastWrite); quiet < every {
		s.timer.Reset(every - quiet)
		return
	}
	if s.hopping {
		s.timer.Reset(every)
		return
	}
	s.sse.Hold(false)
	if err := s.keepAlive(); err != nil {
		s.tickErr = err
		s.cancel()
		return
	}
	s.lastWrite = time.Now()
	s.timer.Reset(every)
}

// hop carries the request to holder while the response is untouched, the
// keep-alives paused meanwhile, and says whether it wrote the response.
// After a hop that wrote nothing, or none tried because the response had
// started, the keep-alives go on and the turn is served here.
func (s *streamer) hop(p Pool, holder string) bool {
	s.mu.Lock()
	if s.sse.Started() || s.tickErr != nil {
		s.mu.Unlock()
		return false
	}
	s.hopping = true
	s.mu.Unlock()
	made := s.rl.hop(s.ctx, p, holder)
	s.mu.Lock()
	s.hopping = false
	s.over = made
	s.lastWrite = time.Now()
	s.mu.Unlock()
	return made
}

// stopTicks ends the keep-alives; no tick writes after it returns.
func (s *streamer) stopTicks() {
	s.mu.Lock()
	s.over = true
	s.mu.Unlock()
	s.timer.Stop()
}

// streamer is one stream under way.
type streamer struct {
	rl     *Relay
	ctx    context.Context
	cancel context.CancelFunc // ends ctx
	sse    *SSE
	enc    Stream
	opened bool
	// flowing is set once the answer's first event was written.
	flowing bool

	// mu is held by each write: the relay's and the keep-alive timer's.
	mu        sync.Mutex
	timer     *time.Timer
	lastWrite time.Time
	// over is set once the stream ended: no more keep-alives.
	over bool
	// hopping is set while another replica's answer is copied to the
	// client: the response is the hop's.
	hopping bool
	// tickErr is a keep-alive's failed write.
	tickErr error
}

// open writes the protocol's opening, held in the buffer: it goes out with
// what follows it (the first event or a keep-alive), in one write.
func (s *streamer) open() error {
	if s.opened {
		return nil
	}
	s.opened = true
	held := s.sse.hold
	s.sse.Hold(true)
	err := s.enc.Open()
	s.sse.Hold(held)
	return err
}

// keepAlive opens the stream when it is not yet, and keeps it alive.
func (s *streamer) keepAlive() error {
	if err := s.open(); err != nil {
		return err
	}
	return s.enc.KeepAlive()
}

// write writes one event; done is true once the answer is complete.
func (s *streamer) write(ev chat.Event) (done bool, err error) {
	if err := s.open(); err != nil {
		return false, err
	}
	switch ev.Type {
	case chat.EventText:
		s.flowing = true
		return false, s.enc.Text(ev.Text)
	case chat.EventToolCall:
		s.flowing = true
		return false, s.enc.ToolCall(ev.ToolCall)
	case chat.EventDone:
		_ = s.enc.Done(ev) // the stream is over either way
		return true, nil
	}
	return false, nil
}

// writeFailed ends a stream whose client stopped reading.
func (s *streamer) writeFailed(err error) Outcome {
	s.rl.log.LogAttrs(s.ctx, slog.LevelDebug, "stream write failed", slog.String("protocol", s.rl.cfg.Protocol),
		slog.String("request_id", httpx.RequestID(s.ctx)), slog.Any("err", err))
	return Outcome{Err: err, Started: s.sse.Started()}
}

// fail ends the answer with err: a JSON error before the stream started,
// the protocol's failed ending after, nothing when the client is gone.
func (s *streamer) fail(err error) Outcome {
	out := Outcome{Err: err, Started: s.sse.Started()}
	if !out.Started {
		return s.rl.Fail(s.ctx, s.sse.w, err)
	}
	if apierr.Gone(s.ctx, err) {
		out.Told = ClientGone
		return out
	}
	p := apierr.Classify(err)
	s.rl.logFailure(s.ctx, &p, true)
	_ = s.enc.Fail(&p) // best effort: the client may be gone
	out.Told = p.Message
	return out
}
