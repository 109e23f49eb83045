package lingma

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/lingmarpc"
	"github.com/poolgate/poolgate/pool/textchat"
	"github.com/poolgate/poolgate/pool/worker"
)

// chatParams is the union of chat/answer, chat/think and chat/finish params.
type chatParams struct {
	RequestID  string  `json:"requestId"`
	SessionID  string  `json:"sessionId"`
	Text       string  `json:"text"`
	Reason     string  `json:"reason"`
	StatusCode flexInt `json:"statusCode"`
	FullAnswer string  `json:"fullAnswer"`
	// ErrorMessage is the error text's name in the worker's replies;
	// ErrorMsg the name earlier notes used; RetryAfter (seconds) is no
	// public capture's but is heard when a worker sends it.
	ErrorMessage string     `json:"errorMessage"`
	ErrorMsg     string     `json:"errorMsg"`
	RetryAfter   flexString `json:"retryAfter"`
	method       string
	// call is the tool call of a tool/invoke.
	call *chat.ToolCall
}

// turn is the reader's side of one running chat turn: the queue of the
// worker's messages for it.
type turn struct {
	*worker.Inbox[*chatParams]
	// offered names the tools the worker may invoke natively in this turn;
	// set before the turn is registered, read-only after.
	offered map[string]bool
	// builtins counts the worker's own tools it asked the gateway to run
	// in this turn (its agent loop ran).
	builtins atomic.Int32
}

// askParams are chat/ask's params: every field of the minimal request seen
// on the wire (Lingma 2.11.1), in its order. Those the gateway has no use
// for are sent empty, as there.
type askParams struct {
	RequestID           string       `json:"requestId"`
	ChatTask            string       `json:"chatTask"`
	ChatContext         *chatContext `json:"chatContext"`
	SessionID           string       `json:"sessionId"`
	CodeLanguage        string       `json:"codeLanguage"`
	IsReply             bool         `json:"isReply"`
	Source              int          `json:"source"`
	QuestionText        string       `json:"questionText"`
	Stream              bool         `json:"stream"`
	TaskDefinitionType  string       `json:"taskDefinitionType"`
	Extra               *askExtra    `json:"extra"`
	SessionType         string       `json:"sessionType"`
	TargetAgent         string       `json:"targetAgent"`
	PluginPayloadConfig any          `json:"pluginPayloadConfig"`
	Mode                string       `json:"mode"`
	ShellType           string       `json:"shellType"`
	CustomModel         any          `json:"customModel"`
}

// chatContext repeats the prompt, when Config.ChatContext asks for it.
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
	tr := &turn{Inbox: worker.NewInbox[*chatParams]()}
	p := c.askParams(t, reqID, tr)
	c.mu.Lock()
	c.turns[reqID] = tr
	c.mu.Unlock()
	var res result
	err := c.call(ctx, "chat/ask", p, &res)
	if err == nil && res.failed() {
		err = c.askError(res.message())
	}
	if err != nil {
		c.endTurn(reqID)
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			c.stop(reqID) // the ask may have reached the worker
		}
		var rpc *lingmarpc.Error
		if errors.As(err, &rpc) && c.cfg.LoginText.MatchString(rpc.Message) {
			err = fmt.Errorf("%w: %w", chat.ErrNotLoggedIn, err)
		}
		return nil, err
	}
	return c.newAnswer(ctx, t, reqID, tr), nil
}

// askParams builds chat/ask's params for t and notes on tr the tools the
// worker may invoke natively. This is the one place the ask is shaped.
func (c *Client) askParams(t *chat.Turn, reqID string, tr *turn) askParams {
	mode, sessionType := c.mode(t), "chat"
	if mode == ModeAgent {
		sessionType = c.cfg.AgentSessionType
	}
	var extra askExtra
	prompt := ""
	if c.nativeTools(t) {
		extra.ToolConfig, tr.offered = nativeTools(t)
		prompt = textchat.RenderNative(t)
	} else {
		prompt = textchat.Render(t)
	}
	if t.Model != "" {
		extra.ModelConfig = &modelConfig{Key: t.Model}
	}
	p := askParams{
		RequestID:    reqID,
		ChatTask:     "FREE_INPUT",
		SessionID:    t.SessionID,
		IsReply:      t.SessionID != "",
		Source:       1,
		QuestionText: prompt,
		Stream:       true,
		SessionType:  sessionType,
		Mode:         mode,
	}
	if c.cfg.ChatContext == ContextPrompt {
		p.ChatContext = &chatContext{Text: prompt}
	}
	if extra.ModelConfig != nil || extra.ToolConfig != nil {
		p.Extra = &extra
	}
	return p
}

// Ask is chat/ask's params for t as the driver's client sends them (the
// tools as the Config's tool mode says, emulated unless native): poolgate
// doctor asks a real worker with them.
func (d *Driver) Ask(t *chat.Turn, reqID string) any {
	c := &Client{cfg: d.cfg, native: d.cfg.ToolMode == ToolsNative}
	return c.askParams(t, reqID, &turn{})
}

// mode is the ask mode of t.
func (c *Client) mode(t *chat.Turn) string {
	if t.Agent {
		return ModeAgent
	}
	return c.cfg.Mode
}

// nativeTools reports whether t's tools go to the worker as data.
func (c *Client) nativeTools(t *chat.Turn) bool {
	return c.native && c.mode(t) == ModeAgent && len(t.Tools) > 0 && t.ToolChoice.Mode != chat.ToolNone
}

// Continues reports whether t may continue the upstream session of the
// conversation's earlier turns, per Config.Reuse. The router asks before
// it sends only the new messages; a session handed out by a turn is
// already one its policy allowed (see stream.keep).
func (c *Client) Continues(t *chat.Turn) bool {
	if c.cfg.Reuse == ReuseChatOnly {
		return c.mode(t) != ModeAgent && len(t.Tools) == 0
	}
	return !c.nativeTools(t)
}

// forget deletes an upstream session that nobody may continue, without
// waiting for the answer (the turn's caller must not wait on it).
func (c *Client) forget(sessionID string) {
	if sessionID == "" {
		return
	}
	frame, err := requestFrame(c.nextID.Add(1), "chat/deleteSessionById", map[string]string{"sessionId": sessionID})
	if err == nil {
		_ = c.write(frame, c.cfg.StopTimeout) // best effort
	}
}

func (c *Client) endTurn(reqID string) {
	c.mu.Lock()
	delete(c.turns, reqID)
	c.mu.Unlock()
	if c.rec != nil {
		c.rec.end(reqID)
	}
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
		s: stream{parser: textchat.NewParser(t), session: t.SessionID, cfg: &c.cfg,
			reusable: c.Continues(t), builtins: &tr.builtins, forget: c.forget}}
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
	case <-a.tr.Wake:
		a.q = a.tr.Take(a.q)
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
		if a.ended = s.handle(a.tr.Take(a.q)); !a.ended {
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
	cfg     *Config
	parser  *textchat.Parser
	session string
	// reusable says the turn's kind lets its session be continued;
	// builtins counts the worker's own tools it ran (then it may not be);
	// forget deletes a session that may not.
	reusable bool
	builtins *atomic.Int32
	forget   func(sessionID string)
	gotText  bool
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
	s.emit(chat.Event{Type: chat.EventDone, Finish: chat.FinishToolCalls, SessionID: s.keep()})
}

// keep is the session a follow-up may continue: the turn's, unless the
// reuse policy says its session holds more than the gateway controls, in
// which case the session is deleted and none is handed out.
func (s *stream) keep() string {
	if s.reusable && s.builtins.Load() == 0 {
		return s.session
	}
	s.forget(s.session)
	return ""
}

// finish queues the turn's last events.
func (s *stream) finish(m *chatParams) {
	if s.calls > 0 {
		// The calls are the answer: however the worker ends a turn that
		// waits for their results, the caller gets them.
		s.finishCalls()
		return
	}
	if err := finishError(m, s.cfg); err != nil {
		s.emit(chat.Event{Type: chat.EventError, Err: err})
		return
	}
	if !s.gotText && m.FullAnswer != "" {
		s.emitAll(s.parser.Text(m.FullAnswer))
	}
	evs, reason := s.parser.Finish()
	s.emitAll(evs)
	s.emit(chat.Event{Type: chat.EventDone, Finish: reason, SessionID: s.keep()})
}
