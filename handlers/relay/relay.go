// Package relay is what a protocol is to the edge, and what carries an
// answer from the pool to the client the same way for every protocol. A
// protocol (Protocol, protocol.go) is a codec and all the edge knows of it:
// its endpoints, the requests it claims, its one look at a request before
// it is authorized (its key, its path), the decode of a request into a
// Decoded, the neutral chat.Request and the encoder of its answer (Encoder
// for a stream, BodyEncoder for one JSON body), its JSON error body, and,
// when it has them, its token count (Counter, counted once here: Count) and
// model listing (Lister). Codec is the part every protocol's handler
// shares, Options the settings they all take. The edge opens the answer (a chat.Answer) and hands it here, on the
// request's own goroutine. The relay owns the SSE stream (headers, framing,
// flushing and the write deadline), opening a stream early when the answer
// is slow to start, keep-alives while a stream is quiet (from Start, before
// the answer is opened), pausing them while the edge hops to the replica
// that holds the turn, the ending of a complete or a failed answer, a
// client that went away, and the non-stream path that collects the whole
// answer before it is encoded. Errors are classified by apierr. The relay
// knows neither the router nor the cluster.
package relay

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/internal/chat"
)

// Encoder is a protocol's encoder of a streamed answer. A method's error
// means the client can no longer be written to.
type Encoder interface {
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

// BodyEncoder is a protocol's encoder of a whole answer as one JSON body.
type BodyEncoder interface {
	Text(s string) error
	ToolCall(tc chat.ToolCall) error
	// Body is the answer's JSON, given its closing event.
	Body(done chat.Event) ([]byte, error)
}

// ServedBy is a BodyEncoder that names the instance that served the
// answer in its body (the Python gateway's served_by); the edge tells it
// before the body is encoded.
type ServedBy interface {
	ServedBy(instance string)
}

// Collected folds the text and tool calls of a whole answer, for a
// BodyEncoder whose body holds the text before the calls.
type Collected struct {
	text  strings.Builder
	Calls []chat.ToolCall
}

// Text adds a piece of text.
func (a *Collected) Text(s string) error {
	a.text.WriteString(s)
	return nil
}

// ToolCall adds a call.
func (a *Collected) ToolCall(tc chat.ToolCall) error {
	a.Calls = append(a.Calls, tc)
	return nil
}

// Content is the text so far.
func (a *Collected) Content() string { return a.text.String() }

// ObjectArgs returns a call's arguments when they are a JSON object, else
// "{}": a protocol whose calls carry their arguments as an object (a
// tool_use block's input, a functionCall's args) has clients that fail to
// decode the whole answer on anything else.
func ObjectArgs(args string) string {
	s := strings.TrimSpace(args)
	if s == "" || s[0] != '{' || !json.Valid([]byte(s)) {
		return "{}"
	}
	return s
}

// InstanceHeader names the instance that served a request.
const InstanceHeader = "X-Poolgate-Instance"

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
	Options
	// Protocol names the protocol in logs, metrics and the request log
	// ("chat", "responses", "messages", "gemini").
	Protocol string
	// WriteError writes a problem as the protocol's JSON error body, with
	// its status.
	WriteError func(w http.ResponseWriter, p *apierr.Problem)
	// Dropped lists every field the protocol's decoder may report as
	// dropped (the series of poolgate_request_fields_ignored_total).
	Dropped []string
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

// Name names the protocol in logs, metrics and the request log.
func (rl *Relay) Name() string { return rl.cfg.Protocol }

// NewStream returns the stream an Encoder writes to on w: server-sent
// events, or, for a protocol that frames its stream itself (SSE.Raw), the
// stream sent as contentType.
func (rl *Relay) NewStream(w http.ResponseWriter, contentType string) *SSE {
	s := newSSE(w)
	s.WriteTimeout = rl.cfg.WriteTimeout
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
	rl.WriteProblem(w, &p)
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

// Hop runs hop, which carries the request to the replica that holds its
// turn, and says whether it did; a failure is logged (the turn is then
// served here).
func (rl *Relay) Hop(ctx context.Context, holder string, hop func() error) bool {
	err := hop()
	if err != nil {
		rl.log.LogAttrs(ctx, slog.LevelWarn, "hop to the replica that holds the turn failed, serving here",
			slog.String("holder", holder), slog.String("request_id", httpx.RequestID(ctx)), slog.Any("err", err))
	}
	return err == nil
}

// Collect answers with one JSON body: the whole answer ans (or err, when
// it could not be opened) is collected into enc, then encoded. Any failure
// is a JSON error with its status. The answer is closed before its body is
// written: what closing does (the router writes the conversation's affinity
// back) is done before the client, who has nothing until the body, can send
// its follow-up, to whichever replica. A stream's last event goes out
// before (Streamer.Relay).
func (rl *Relay) Collect(ctx context.Context, w http.ResponseWriter, ans chat.Answer, err error, enc BodyEncoder) Outcome {
	if err == nil {
		defer ans.Close()
	}
	for err == nil {
		// The answer ends when ctx does, so this wait needs no select of
		// its own (which would cost every request the context's done
		// channel).
		ev, ok := ans.Next()
		if ev, err = received(ctx, ev, ok); err != nil {
			break
		}
		switch ev.Type {
		case chat.EventText:
			err = enc.Text(ev.Text)
		case chat.EventToolCall:
			err = enc.ToolCall(ev.ToolCall)
		case chat.EventDone:
			var body []byte
			if body, err = enc.Body(ev); err == nil {
				ans.Close()
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

// Start starts a streamed answer on sse (from rl.NewStream), encoded by enc,
// before the answer is opened: from now to Stop, one timer writes the
// keep-alives whenever nothing was written for a whole interval. A long
// wait in the queue, an answer held back until it is clear whether it is
// a tool call, or a quiet stream must not look like a dead connection to
// the client or a proxy. Its first keep-alive commits the stream (headers
// and the protocol's opening), so an error after it is an in-stream error.
// cancel ends ctx: the streamer calls it when the client stops reading.
// The caller opens the answer (Hop while the response is untouched), then
// hands it to Relay, and calls Stop.
func (rl *Relay) Start(ctx context.Context, cancel context.CancelFunc, sse *SSE, enc Encoder) *Streamer {
	s := &Streamer{rl: rl, ctx: ctx, cancel: cancel, sse: sse, enc: enc}
	if every := rl.cfg.KeepAlive; every > 0 {
		s.mu.Lock()
		s.lastWrite = time.Now()
		s.timer = time.AfterFunc(every, func() { s.tick(every) })
		s.mu.Unlock()
	}
	return s
}

// Served names the instance that took the turn on the response, unless a
// keep-alive already sent the headers (a stream that had to open before
// any worker took its turn goes without).
func (s *Streamer) Served(instance string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if instance != "" && !s.sse.Started() && s.sse.w.Header().Get(InstanceHeader) == "" {
		s.sse.w.Header().Set(InstanceHeader, instance)
	}
}

// Relay relays the streamed answer ans (or err, when it could not be
// opened) through the encoder. Headers go out with the first thing
// written, so a failure before it is a JSON error with its status; after
// it, the failure is told through the encoder's Fail. A stream that
// started ends with exactly one Done or Fail, unless the client went away.
func (s *Streamer) Relay(ans chat.Answer, err error) Outcome {
	defer s.Stop()
	if ans != nil {
		defer ans.Close()
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
		ev, ok := ans.Next()
		s.mu.Lock()
		out, end := s.relay(ans, ev, ok)
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
func (s *Streamer) relay(events chat.Answer, ev chat.Event, ok bool) (Outcome, bool) {
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
func (s *Streamer) tick(every time.Duration) {
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

// Hop runs hop, which carries the request to the replica at holder, while
// the response is untouched, the keep-alives paused meanwhile, and says
// whether it wrote the response. After a hop that wrote nothing, or none
// tried because the response had started, the keep-alives go on and the
// turn is served here.
func (s *Streamer) Hop(holder string, hop func() error) bool {
	s.mu.Lock()
	if s.sse.Started() || s.tickErr != nil {
		s.mu.Unlock()
		return false
	}
	s.hopping = true
	s.mu.Unlock()
	made := s.rl.Hop(s.ctx, holder, hop)
	s.mu.Lock()
	s.hopping = false
	s.over = made
	s.lastWrite = time.Now()
	s.mu.Unlock()
	return made
}

// Stop ends the keep-alives; no tick writes after it returns. It may be
// called more than once.
func (s *Streamer) Stop() {
	s.mu.Lock()
	s.over = true
	s.mu.Unlock()
	if s.timer != nil {
		s.timer.Stop()
	}
}

// Streamer is one streamed answer under way.
type Streamer struct {
	rl     *Relay
	ctx    context.Context
	cancel context.CancelFunc // ends ctx
	sse    *SSE
	enc    Encoder
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
func (s *Streamer) open() error {
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
func (s *Streamer) keepAlive() error {
	if err := s.open(); err != nil {
		return err
	}
	return s.enc.KeepAlive()
}

// write writes one event; done is true once the answer is complete.
func (s *Streamer) write(ev chat.Event) (done bool, err error) {
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
func (s *Streamer) writeFailed(err error) Outcome {
	s.rl.log.LogAttrs(s.ctx, slog.LevelDebug, "stream write failed", slog.String("protocol", s.rl.cfg.Protocol),
		slog.String("request_id", httpx.RequestID(s.ctx)), slog.Any("err", err))
	return Outcome{Err: err, Started: s.sse.Started()}
}

// fail ends the answer with err: a JSON error before the stream started,
// the protocol's failed ending after, nothing when the client is gone.
func (s *Streamer) fail(err error) Outcome {
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
