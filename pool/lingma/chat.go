package lingma

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/lingmarpc"
	"github.com/poolgate/poolgate/pool/textchat"
)

// codeNotLoggedIn is the JSON-RPC error the worker answers chat/ask with
// when it has no login (as the simulator does; the real binary's code is not
// documented, so its message is checked too).
const codeNotLoggedIn = -32001

// chatParams is the union of chat/answer, chat/think and chat/finish params.
type chatParams struct {
	RequestID  string     `json:"requestId"`
	SessionID  string     `json:"sessionId"`
	Text       string     `json:"text"`
	Reason     string     `json:"reason"`
	StatusCode flexInt    `json:"statusCode"`
	FullAnswer string     `json:"fullAnswer"`
	ErrorMsg   string     `json:"errorMsg"`
	RetryAfter flexString `json:"retryAfter"`
	method     string
	// call is the tool call of a tool/invoke.
	call *chat.ToolCall
}

// turn is the reader's side of one running chat turn: an unbounded queue, so
// a slow consumer never stalls the reader (and with it every other call).
type turn struct {
	mu   sync.Mutex
	q    []*chatParams
	wake chan struct{}
	// offered names the tools the worker may invoke natively in this turn;
	// set before the turn is registered, read-only after.
	offered map[string]bool
}

func (t *turn) push(p *chatParams) {
	t.mu.Lock()
	t.q = append(t.q, p)
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// take swaps the queue out into spare's storage.
func (t *turn) take(spare []*chatParams) []*chatParams {
	t.mu.Lock()
	q := t.q
	t.q = spare[:0]
	t.mu.Unlock()
	return q
}

type askParams struct {
	RequestID    string      `json:"requestId"`
	SessionID    string      `json:"sessionId"`
	QuestionText string      `json:"questionText"`
	ChatContext  chatContext `json:"chatContext"`
	ChatTask     string      `json:"chatTask"`
	SessionType  string      `json:"sessionType"`
	Mode         string      `json:"mode"`
	Stream       bool        `json:"stream"`
	Source       int         `json:"source"`
	IsReply      bool        `json:"isReply"`
	Extra        *askExtra   `json:"extra,omitempty"`
}

type chatContext struct {
	Text string `json:"text"`
}

type askExtra struct {
	ModelConfig *modelConfig `json:"modelConfig,omitempty"`
	ToolConfig  *toolConfig  `json:"toolConfig,omitempty"`
}

type modelConfig struct {
	Key string `json:"key"`
}

// toolConfig passes the offered tools natively, in the OpenAI function
// format (the shape public gateways hand the agent mode; not documented for
// the real binary).
type toolConfig struct {
	Provider   string         `json:"provider"`
	Tools      []functionTool `json:"tools"`
	ToolChoice any            `json:"tool_choice,omitempty"`
}

type functionTool struct {
	Type     string   `json:"type"`
	Function function `json:"function"`
}

type function struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// nativeTools is t's tool configuration for chat/ask and the names the
// worker may invoke.
func nativeTools(t *chat.Turn) (*toolConfig, map[string]bool) {
	tc := &toolConfig{Provider: "openai", Tools: make([]functionTool, 0, len(t.Tools))}
	offered := make(map[string]bool, len(t.Tools))
	for _, tl := range t.Tools {
		tc.Tools = append(tc.Tools, functionTool{Type: "function",
			Function: function{Name: tl.Name, Description: tl.Description, Parameters: tl.Parameters}})
		offered[tl.Name] = true
	}
	switch t.ToolChoice.Mode {
	case chat.ToolRequired:
		tc.ToolChoice = "required"
	case chat.ToolNamed:
		tc.ToolChoice = map[string]any{"type": "function", "function": map[string]string{"name": t.ToolChoice.Name}}
	default:
		tc.ToolChoice = "auto"
	}
	return tc, offered
}

// Start starts one turn with chat/ask. The caller reads the answer on its
// own goroutine: the worker's messages go from the connection's reader
// straight to it. The turn ends with its answer, when ctx ends, or at
// TurnTimeout, whichever comes first.
func (c *Client) Start(ctx context.Context, t *chat.Turn) (chat.Answer, error) {
	a, err := c.ask(ctx, t)
	if err != nil {
		return nil, err
	}
	return a, nil
}

// ask sends chat/ask and returns the turn's answer, ready to be read.
func (c *Client) ask(ctx context.Context, t *chat.Turn) (*turnAnswer, error) {
	if err := c.cfg.checkTurn(t); err != nil {
		return nil, fmt.Errorf("lingma %s: %w", c.name, err) // before the prompt is built
	}
	// The worker's requestId is unique per ask even when the router retries a
	// request on the same worker: a stopped turn's late chat/finish must not
	// reach its successor. The gateway's id stays in front for the logs.
	reqID := newRequestID()
	if t.RequestID != "" {
		reqID = t.RequestID + "-" + strconv.FormatInt(c.turnSeq.Add(1), 10)
	}
	tr := &turn{wake: make(chan struct{}, 1)}
	mode := c.cfg.Mode
	if t.Agent {
		mode = ModeAgent
	}
	var extra askExtra
	prompt := ""
	if c.native && mode == ModeAgent && len(t.Tools) > 0 && t.ToolChoice.Mode != chat.ToolNone {
		extra.ToolConfig, tr.offered = nativeTools(t)
		prompt = textchat.RenderNative(t)
	} else {
		prompt = textchat.Render(t)
	}
	if t.Model != "" {
		extra.ModelConfig = &modelConfig{Key: t.Model}
	}
	c.mu.Lock()
	c.turns[reqID] = tr
	c.mu.Unlock()

	p := askParams{
		RequestID:    reqID,
		SessionID:    t.SessionID,
		QuestionText: prompt,
		ChatContext:  chatContext{Text: prompt},
		ChatTask:     "FREE_INPUT",
		SessionType:  "chat",
		Mode:         mode,
		Stream:       true,
		Source:       1,
		IsReply:      t.SessionID != "",
	}
	if mode == ModeAgent {
		p.SessionType = "assistant"
	}
	if extra.ModelConfig != nil || extra.ToolConfig != nil {
		p.Extra = &extra
	}
	var res result
	err := c.call(ctx, "chat/ask", p, &res)
	if err == nil && res.failed() {
		err = askError(res.message())
	}
	if err != nil {
		c.endTurn(reqID)
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			c.stop(reqID) // the ask may have reached the worker
		}
		var rpc *lingmarpc.Error
		if errors.As(err, &rpc) && (rpc.Code == codeNotLoggedIn || loginMessage(rpc.Message)) {
			err = fmt.Errorf("%w: %w", chat.ErrNotLoggedIn, err)
		}
		return nil, err
	}
	return c.newAnswer(ctx, t, reqID, tr), nil
}

// askError is the error of a chat/ask answered with success: false.
func askError(msg string) error {
	if loginMessage(msg) {
		return fmt.Errorf("%w: %s", chat.ErrNotLoggedIn, msg)
	}
	return &chat.UpstreamError{Message: "chat/ask: " + msg}
}

func loginMessage(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "not logged in") || strings.Contains(m, "not login") ||
		strings.Contains(m, "unauthorized") || strings.Contains(m, "login required")
}

func (c *Client) endTurn(reqID string) {
	c.mu.Lock()
	delete(c.turns, reqID)
	c.mu.Unlock()
}

// stop sends chat/stop without waiting for its answer: the turn is being
// abandoned either way, and the consumer must not wait for a sick worker.
func (c *Client) stop(reqID string) {
	frame, err := requestFrame(c.nextID.Add(1), "chat/stop", map[string]string{"requestId": reqID})
	if err != nil {
		return
	}
	_ = c.write(frame, c.cfg.StopTimeout) // best effort
}

// turnAnswer is one running turn's answer, read event by event by the
// router. It always ends with one EventDone or EventError.
type turnAnswer struct {
	c     *Client
	reqID string
	tr    *turn
	ctx   context.Context // the caller's
	// tctx adds TurnTimeout; idle fires after ReplyTimeout without a
	// message; settle runs once the worker invoked a tool: a worker that
	// then waits for the result instead of finishing is stopped, and the
	// calls stand.
	tctx         context.Context
	cancel       context.CancelFunc
	idle, settle *time.Timer

	s stream
	q []*chatParams // the messages taken from the turn's queue
	// ended is set once the closing event is queued; stopped once the
	// worker was told to stop; closed once Close ran.
	ended, stopped, closed bool
}

var _ chat.Answer = (*turnAnswer)(nil)

func (c *Client) newAnswer(ctx context.Context, t *chat.Turn, reqID string, tr *turn) *turnAnswer {
	a := &turnAnswer{c: c, reqID: reqID, tr: tr, ctx: ctx,
		idle:   time.NewTimer(c.cfg.ReplyTimeout),
		settle: time.NewTimer(c.cfg.ToolSettle),
		s:      stream{parser: textchat.NewParser(t), session: t.SessionID}}
	a.settle.Stop()
	a.tctx, a.cancel = context.WithTimeout(ctx, c.cfg.TurnTimeout)
	return a
}

// Next returns the answer's next event; false past the closing one.
func (a *turnAnswer) Next() (chat.Event, bool) { return a.s.events.Next(&a.ended, a.step) }

// Buffered says whether events made from the worker's messages wait to be
// returned.
func (a *turnAnswer) Buffered() bool { return a.s.events.Len() > 0 }

// Close ends the turn; one not finished yet is stopped on the worker. Safe
// to call twice.
func (a *turnAnswer) Close() {
	if a.closed {
		return
	}
	a.closed = true
	if !a.ended && !a.stopped {
		a.c.stop(a.reqID)
	}
	a.c.endTurn(a.reqID)
	a.cancel()
	a.idle.Stop()
	a.settle.Stop()
}

// step waits for the worker's next messages (or the end of waiting) and
// queues the events they make; at the end it queues the closing event.
func (a *turnAnswer) step() {
	c, s := a.c, &a.s
	select {
	case <-a.tr.wake:
		a.q = a.tr.take(a.q)
		a.idle.Reset(c.cfg.ReplyTimeout)
		if a.ended = s.handle(a.q); !a.ended && s.calls > 0 {
			a.settle.Reset(c.cfg.ToolSettle)
		}
		return
	case <-a.settle.C:
		a.halt()
		s.finishCalls()
		a.ended = true
		return
	case <-c.done:
		// Messages that arrived before the drop still count.
		if a.ended = s.handle(a.tr.take(a.q)); !a.ended {
			s.emit(chat.Event{Type: chat.EventError, Err: fmt.Errorf("lingma %s: turn %s: %w", c.name, a.reqID, c.gone())})
			a.ended = true
		}
		return
	case <-a.idle.C:
		s.fail = fmt.Errorf("lingma %s: turn %s: no message for %s: %w",
			c.name, a.reqID, c.cfg.ReplyTimeout, context.DeadlineExceeded)
	case <-a.tctx.Done():
	}
	// Abandoned: by the caller, at TurnTimeout or for silence.
	a.halt()
	err := s.fail
	switch {
	case a.ctx.Err() != nil:
		err = a.ctx.Err()
	case err == nil:
		err = fmt.Errorf("lingma %s: turn %s exceeded %s: %w", c.name, a.reqID, c.cfg.TurnTimeout, context.DeadlineExceeded)
	}
	s.emit(chat.Event{Type: chat.EventError, Err: err})
	a.ended = true
}

// halt tells the worker to stop the turn.
func (a *turnAnswer) halt() {
	a.stopped = true
	a.c.stop(a.reqID)
}

// stream is the state of one turn's answer: what the worker's messages made
// of it so far.
type stream struct {
	parser  *textchat.Parser
	session string
	gotText bool
	// calls counts the tool calls the worker invoked natively.
	calls int
	// fail is set when the turn is abandoned for a reason other than ctx.
	fail error
	// events are queued for next.
	events chat.Queue
}

func (s *stream) emit(ev chat.Event) { s.events.Push(ev) }

func (s *stream) emitAll(evs []chat.Event) {
	for _, ev := range evs {
		s.events.Push(ev)
	}
}

// handle turns queued messages into events; done reports that the turn
// finished and its last event is queued.
func (s *stream) handle(q []*chatParams) (done bool) {
	for _, m := range q {
		if m.SessionID != "" {
			s.session = m.SessionID
		}
		switch m.method {
		case "chat/answer":
			s.gotText = s.gotText || m.Text != ""
			s.emitAll(s.parser.Text(m.Text))
		case "tool/invoke":
			s.calls++
			s.emit(chat.Event{Type: chat.EventToolCall, ToolCall: *m.call})
		case "chat/finish":
			s.finish(m)
			return true
		}
	}
	return false
}

// finishCalls ends a turn whose answer is the tools the worker invoked.
func (s *stream) finishCalls() {
	evs, _ := s.parser.Finish()
	s.emitAll(evs)
	s.emit(chat.Event{Type: chat.EventDone, Finish: chat.FinishToolCalls, SessionID: s.session})
}

// finish queues the turn's last events.
func (s *stream) finish(m *chatParams) {
	if s.calls > 0 {
		// The calls are the answer: however the worker ends a turn that
		// waits for their results, the caller gets them.
		s.finishCalls()
		return
	}
	if err := finishError(m); err != nil {
		s.emit(chat.Event{Type: chat.EventError, Err: err})
		return
	}
	if !s.gotText && m.FullAnswer != "" {
		s.emitAll(s.parser.Text(m.FullAnswer))
	}
	evs, reason := s.parser.Finish()
	s.emitAll(evs)
	s.emit(chat.Event{Type: chat.EventDone, Finish: reason, SessionID: s.session})
}

// finishError maps a chat/finish that is not a success to the pool's errors.
func finishError(m *chatParams) error {
	code := int(m.StatusCode)
	msg := m.ErrorMsg
	if msg == "" && m.Reason != "" && m.Reason != "success" {
		msg = m.Reason
	}
	lower := strings.ToLower(msg)
	switch {
	case code == 200 || code == 0 && m.ErrorMsg == "" && m.Reason != "error":
		return nil
	case code == 429 || strings.Contains(lower, "rate limit") || strings.Contains(lower, "ratelimit") ||
		strings.Contains(lower, "quota") || strings.Contains(lower, "too many requests"):
		return &chat.RateLimitedError{RetryAfter: seconds(string(m.RetryAfter)), Message: cmpMsg(msg, code)}
	case code == 401:
		return fmt.Errorf("%w: %w", chat.ErrNotLoggedIn, &chat.UpstreamError{Status: code, Message: cmpMsg(msg, code)})
	}
	return &chat.UpstreamError{Status: code, Message: cmpMsg(msg, code)}
}

func cmpMsg(msg string, code int) string {
	if msg != "" {
		return msg
	}
	return "chat/finish status " + strconv.Itoa(code)
}

// seconds parses a retryAfter value in (possibly fractional) seconds.
func seconds(s string) time.Duration {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || f <= 0 || f > 24*3600 {
		return 0
	}
	return time.Duration(f * float64(time.Second))
}
