package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/poolgate/poolgate/internal/lingmarpc"
)

// Finish reasons and status codes of chat/finish.
const (
	reasonSuccess   = "success"
	reasonError     = "error"
	reasonCancelled = "cancelled"

	statusOK      = 200
	statusTimeout = 408
	statusFailed  = 500
)

// askParams are the chat/ask fields the simulator reads.
type askParams struct {
	RequestID    string `json:"requestId"`
	SessionID    string `json:"sessionId"`
	QuestionText string `json:"questionText"`
	ChatContext  *struct {
		Text string `json:"text"`
	} `json:"chatContext"`
	IsReply     bool   `json:"isReply"`
	Mode        string `json:"mode"`
	SessionType string `json:"sessionType"`
	Extra       struct {
		ModelConfig struct {
			Key string `json:"key"`
		} `json:"modelConfig"`
		ToolConfig *struct {
			Tools []struct {
				Function toolDef `json:"function"`
			} `json:"tools"`
			ToolChoice json.RawMessage `json:"tool_choice"`
		} `json:"toolConfig"`
	} `json:"extra"`
}

// The ask modes and session types the evidence shows: "normal" and "chat"
// seen on the wire for a plain chat, "chat", "edit" and "agent" in the
// plugin's shapes (and none, from its older UI); its session types are
// chat, assistant, developer and inline. Anything else is refused.
var (
	askModes     = map[string]bool{"": true, "normal": true, "chat": true, "edit": true, "agent": true}
	sessionTypes = map[string]bool{"chat": true, "assistant": true, "developer": true, "inline": true}
)

// checkAsk refuses an ask whose mode or session type no evidence shows.
func (s *Sim) checkAsk(p *askParams) error {
	if !askModes[p.Mode] || p.Mode == "normal" && s.cfg.Deviate["no-normal"] {
		return fmt.Errorf("unsupported mode %q", p.Mode)
	}
	if !sessionTypes[p.SessionType] {
		return fmt.Errorf("unsupported sessionType %q", p.SessionType)
	}
	return nil
}

// context says what the ask's chatContext held: null, or text of N bytes.
func (p *askParams) context() string {
	if p.ChatContext == nil {
		return "null"
	}
	return "text:" + strconv.Itoa(len(p.ChatContext.Text))
}

// nativeTools is the tool configuration an agent-mode ask passed as data,
// when the simulator speaks native tools; nil otherwise.
func (p *askParams) nativeTools(native bool) *toolSpec {
	tc := p.Extra.ToolConfig
	if !native || p.Mode != "agent" || tc == nil || len(tc.Tools) == 0 {
		return nil
	}
	ts := &toolSpec{Choice: "auto"}
	for _, t := range tc.Tools {
		ts.Tools = append(ts.Tools, t.Function)
	}
	var choice any
	_ = json.Unmarshal(tc.ToolChoice, &choice) // an unreadable choice is auto
	switch c := choice.(type) {
	case string:
		ts.Choice = c
	case map[string]any:
		if f, ok := c["function"].(map[string]any); ok {
			if n, ok := f["name"].(string); ok {
				ts.Choice = n
			}
		}
	}
	if ts.Choice == "none" {
		return nil
	}
	return ts
}

// toolInvoke is the body of a tool/invoke request: the plugin's
// ToolInvokeRequest (requestId, toolCallId, name, parameters, async) and the
// sessionId.
type toolInvoke struct {
	RequestID  string         `json:"requestId"`
	SessionID  string         `json:"sessionId"`
	ToolCallID string         `json:"toolCallId"`
	Name       string         `json:"name"`
	Parameters map[string]any `json:"parameters"`
	Async      bool           `json:"async"`
}

// finishParams is the body of chat/finish: the plugin's shape, with the
// error text as errorMessage (the name of the worker's replies) and, only
// for the rate-limit fault, retryAfter in whole seconds.
type finishParams struct {
	RequestID    string         `json:"requestId"`
	SessionID    string         `json:"sessionId"`
	Reason       string         `json:"reason"`
	StatusCode   int            `json:"statusCode"`
	FullAnswer   string         `json:"fullAnswer"`
	Extra        map[string]any `json:"extra"`
	ErrorMessage string         `json:"errorMessage,omitempty"`
	RetryAfter   int            `json:"retryAfter,omitempty"`
}

// deltaParams is the body of chat/answer and chat/think.
type deltaParams struct {
	RequestID string `json:"requestId"`
	SessionID string `json:"sessionId"`
	Text      string `json:"text"`
	Step      string `json:"step,omitempty"`
}

// turn is one chat/ask being answered.
type turn struct {
	reqID, sid string
	n          int // asks in the session so far, this one included
	reply      bool
	question   string
	secs       []section
	d          directives
	ratelimit  bool // from --ratelimit-every
	fail       bool // from --fail-rate
	// mode, sessionType and model are what the ask asked for ([[sim:ask]]);
	// context says what its chatContext held.
	mode, sessionType, model, context string
	// native holds the tools the ask passed as data (--native-tools).
	native *toolSpec
}

// ask handles chat/ask: it answers the request at once and streams the turn
// from a goroutine the connection owns.
func (c *conn) ask(m *lingmarpc.Message) {
	var p askParams
	if err := json.Unmarshal(m.Params, &p); err != nil || p.RequestID == "" {
		c.respond(m.ID, nil, &lingmarpc.Error{Code: codeInvalidParams, Message: "chat/ask needs params with a requestId"})
		return
	}
	if _, _, ok := c.s.creds.status(); !ok {
		// The worker's own words when it has no credentials.
		c.respond(m.ID, c.s.failure("", "No cached user info, please login."), nil)
		return
	}
	if err := c.s.checkAsk(&p); err != nil {
		c.respond(m.ID, c.s.failure("INVALID_PARAMS", err.Error()), nil)
		return
	}
	question := p.QuestionText
	if question == "" && p.ChatContext != nil {
		question = p.ChatContext.Text
	}
	nth := c.s.asks.Add(1)
	sid, n, ok := c.s.openSession(p.SessionID, question, p.IsReply)
	if !ok {
		c.respond(m.ID, c.s.accepted(), nil)
		c.turns.Go(func() {
			c.finish(finishParams{RequestID: p.RequestID, SessionID: p.SessionID, Reason: reasonError,
				StatusCode: statusFailed, ErrorMessage: "session not found"})
		})
		return
	}
	ctx, stop := context.WithCancelCause(c.ctx)
	if !c.s.startTurn(p.RequestID, stop) {
		stop(nil)
		c.respond(m.ID, nil, &lingmarpc.Error{Code: codeInvalidParams, Message: "requestId already running: " + p.RequestID})
		return
	}
	secs := relayed(parsePrompt(question))
	d := directivesOf(c.s.cfg.Directives, secs).withDefaults(c.s.cfg.Faults)
	if len(d.unknown) > 0 {
		c.log.Warn("ignoring unknown or malformed directives", "directives", d.unknown)
	}
	f := c.s.cfg.Faults
	t := &turn{
		reqID: p.RequestID, sid: sid, n: n, reply: p.IsReply, question: question, secs: secs, d: d,
		ratelimit: f.RatelimitEvery > 0 && nth%int64(f.RatelimitEvery) == 0,
		fail:      f.FailRate > 0 && rand.Float64() < f.FailRate,
		mode:      p.Mode, sessionType: p.SessionType, model: p.Extra.ModelConfig.Key, context: p.context(),
		native: p.nativeTools(c.s.cfg.NativeTools),
	}
	c.respond(m.ID, c.s.accepted(), nil)
	c.turns.Go(func() {
		defer stop(nil)
		defer c.s.endTurn(t.reqID)
		c.runTurn(ctx, t)
	})
}

// runTurn applies the turn's faults and streams its answer, between the
// step callbacks a real worker sends around a turn.
func (c *conn) runTurn(ctx context.Context, t *turn) {
	fin := finishParams{RequestID: t.reqID, SessionID: t.sid}
	if t.d.logout {
		if err := c.s.creds.logout(); err != nil {
			c.log.Error("sim logout", "err", err)
		}
	}
	if err := c.opening(ctx, t); err != nil {
		c.abort(t, fin, "", err)
		return
	}
	if t.d.hang {
		<-ctx.Done()
		c.abort(t, fin, "", context.Cause(ctx))
		return
	}
	if err := sleepCtx(ctx, t.d.delay); err != nil {
		c.abort(t, fin, "", err)
		return
	}
	if c.failEarly(ctx, t, fin) {
		return
	}
	if t.d.think {
		if err := c.call(ctx, "chat/think", deltaParams{RequestID: t.reqID, SessionID: t.sid, Text: "Thinking...", Step: "start"}); err != nil {
			c.abort(t, fin, "", err)
			return
		}
	}
	if t.native != nil && !t.d.whoami && !t.d.ask {
		if p := planAnswer(t.secs, t.native, t.d.calls); len(p.calls) > 0 {
			c.invokeTools(ctx, t, fin, p.calls)
			return
		}
	}
	note, err := c.builtins(ctx, t)
	if err != nil {
		c.toolFailed(ctx, t, fin, err)
		return
	}
	c.streamAnswer(ctx, t, fin, note)
}

// opening sends what a real worker sends as a turn starts: the first step
// callback and, on a session's first turn, its title. Each is a request
// the client must answer.
func (c *conn) opening(ctx context.Context, t *turn) error {
	if err := c.step(ctx, t, "step_start", "done"); err != nil {
		return err
	}
	if t.n > 1 {
		return nil
	}
	title := stripDirectives(lastUserText(t.secs))
	if r := []rune(title); len(r) > 40 {
		title = string(r[:40])
	}
	return c.call(ctx, "session/title/update", map[string]string{"sessionId": t.sid, "sessionTitle": title})
}

// step sends chat/process_step_callback, as the worker reports its steps.
func (c *conn) step(ctx context.Context, t *turn, step, status string) error {
	return c.call(ctx, "chat/process_step_callback", map[string]any{"requestId": t.reqID, "sessionId": t.sid,
		"step": step, "description": "", "status": status, "result": nil, "message": ""})
}

// failEarly finishes a turn that fails before its first delta, and reports
// whether it did.
func (c *conn) failEarly(ctx context.Context, t *turn, fin finishParams) bool {
	switch {
	case t.d.ratelimit || t.ratelimit:
		// No capture shows a throttled worker: a server error whose text
		// says so, with the one field no capture shows (retryAfter).
		fin.Reason, fin.StatusCode, fin.ErrorMessage = reasonError, statusFailed, "rate limited: too many requests"
		fin.RetryAfter = int(math.Ceil(t.d.retryAfter.Seconds()))
	case t.d.timeout:
		fin.Reason, fin.StatusCode, fin.ErrorMessage = reasonError, statusTimeout, "upstream request timed out"
	case t.d.errAfter == 0 || t.fail:
		fin.Reason, fin.StatusCode, fin.ErrorMessage = reasonError, statusFailed, "simulated error"
	default:
		return false
	}
	c.end(ctx, t, fin)
	return true
}

// streamAnswer sends the answer (with note, the built-in tools' outcome,
// after it) in deltas and finishes the turn, applying the stream's faults.
func (c *conn) streamAnswer(ctx context.Context, t *turn, fin finishParams, note string) {
	text := c.answerText(t)
	if note != "" {
		text += "\n" + note
	}
	chunks, full := splitChunks(text, t.d.chunks)
	var sent strings.Builder
	for i, chunk := range chunks {
		if t.d.errAfter == i {
			break
		}
		if i > 0 {
			if err := sleepCtx(ctx, t.d.chunkDelay); err != nil {
				c.abort(t, fin, sent.String(), err)
				return
			}
		}
		sent.WriteString(chunk) // a stopped turn's partial answer includes the delta in flight
		if err := c.call(ctx, "chat/answer", deltaParams{RequestID: t.reqID, SessionID: t.sid, Text: chunk}); err != nil {
			c.abort(t, fin, sent.String(), err)
			return
		}
		if t.d.crash {
			c.crash()
			return
		}
	}
	if t.d.crash { // an empty answer crashes before its finish
		c.crash()
		return
	}
	fin.FullAnswer = sent.String()
	if t.d.errAfter >= 0 {
		fin.Reason, fin.StatusCode, fin.ErrorMessage = reasonError, statusFailed, "simulated error"
		c.end(ctx, t, fin)
		return
	}
	fin.Reason, fin.StatusCode, fin.FullAnswer = reasonSuccess, statusOK, full
	c.s.recordAnswer(t.sid, t.n, full)
	c.end(ctx, t, fin)
}

// end sends the last step callback, then chat/finish.
func (c *conn) end(ctx context.Context, t *turn, fin finishParams) {
	status := "done"
	if fin.StatusCode != statusOK {
		status = "error"
	}
	if err := c.step(ctx, t, "step_end", status); err != nil {
		c.abort(t, fin, fin.FullAnswer, err)
		return
	}
	c.finish(fin)
}

// invokeTools answers with native tool calls: one tool/invoke per call,
// each waiting for the client's acknowledgement, then a successful finish
// with no text (the results come with the next ask). [[sim:await-results]]
// leaves the turn open instead, until chat/stop or a disconnect, as a worker
// that waits for the results would.
func (c *conn) invokeTools(ctx context.Context, t *turn, fin finishParams, calls []*toolCall) {
	for i, call := range calls {
		inv := toolInvoke{RequestID: t.reqID, SessionID: t.sid, Name: call.name, Parameters: call.args,
			ToolCallID: "call_sim_" + strconv.Itoa(t.n) + "_" + strconv.Itoa(i)}
		if err := c.call(ctx, "tool/invoke", inv); err != nil {
			c.abort(t, fin, "", err)
			return
		}
	}
	if t.d.awaitResults {
		<-ctx.Done()
		c.abort(t, fin, "", context.Cause(ctx))
		return
	}
	full := renderJSONCalls(calls)
	c.s.recordAnswer(t.sid, t.n, full)
	fin.Reason, fin.StatusCode = reasonSuccess, statusOK
	c.end(ctx, t, fin)
}

// answerText is the turn's whole answer before it is cut into deltas. A
// prompt that asks for JSON gets JSON, whatever the directives ask to be
// told: its caller parses the answer.
func (c *conn) answerText(t *turn) string {
	_, isJSON := promptFormat(t.secs)
	if t.d.whoami && !isJSON {
		return whoamiText(t.sid, t.n, t.reply, len(t.secs), len(t.question))
	}
	if t.d.env {
		wd, _ := os.Getwd()
		return fmt.Sprintf("home=%s tmpdir=%s runtime=%s cwd=%s", os.Getenv("HOME"), os.Getenv("TMPDIR"),
			os.Getenv("XDG_RUNTIME_DIR"), wd)
	}
	if t.d.ask && !isJSON {
		tools := "none"
		switch {
		case t.native != nil:
			tools = "native:" + strconv.Itoa(len(t.native.Tools))
		case promptTools(t.secs) != nil:
			tools = "prompt:" + strconv.Itoa(len(promptTools(t.secs).Tools))
		}
		return fmt.Sprintf("mode=%s session_type=%s model=%s tools=%s endpoint=%s context=%s",
			t.mode, t.sessionType, t.model, tools, c.s.endpoint(), t.context)
	}
	tools := promptTools(t.secs)
	if tools == nil && t.n > 1 {
		tools = c.s.earlierTools(t.sid, t.n)
	}
	return planText(t.secs, tools, t.d)
}

// planText is the planned answer to secs as text: its tool calls in the
// form the directives ask for, or its text padded as they ask.
func planText(secs []section, tools *toolSpec, d directives) string {
	p := planAnswer(secs, tools, d.calls)
	switch {
	case len(p.calls) > 0 && d.toolCode:
		return renderToolCode(p.calls[0])
	case len(p.calls) > 0:
		return renderJSONCalls(p.calls)
	case d.words >= 0:
		return padWords(p.text, d.words)
	}
	return p.text
}

// crash ends the process as [[sim:crash]] asks. It returns only under a test
// hook; the connection is then dropped as a dead process would drop it.
func (c *conn) crash() {
	c.log.Warn("sim crash: exiting mid-stream")
	c.s.cfg.Exit(3)
	_ = c.ws.CloseNow()
}

// abort ends a turn whose stream was interrupted by err: chat/stop finishes
// it as cancelled; a silent client or a closed connection just ends it.
func (c *conn) abort(t *turn, fin finishParams, partial string, err error) {
	switch {
	case errors.Is(err, errStopped):
		// As a server built for the plugin ends a stopped turn: the plugin
		// reads 200 as "not an error", the reason says what happened.
		fin.Reason, fin.StatusCode, fin.FullAnswer = reasonCancelled, statusOK, partial
		c.finish(fin)
	case errors.Is(err, errNoReply):
		c.log.Warn("no response from client, abandoning turn", "requestId", t.reqID, "err", err)
	default:
		c.log.Debug("turn ended", "requestId", t.reqID, "err", err)
	}
}

// finish sends chat/finish and waits for its reply like any other request.
func (c *conn) finish(fin finishParams) {
	if c.s.cfg.Deviate["no-finish"] {
		c.log.Info("deviation no-finish: no chat/finish", "requestId", fin.RequestID)
		return
	}
	if err := c.call(c.ctx, "chat/finish", c.s.finishBody(fin)); err != nil {
		if errors.Is(err, errNoReply) {
			c.log.Warn("no response from client to chat/finish", "requestId", fin.RequestID)
			return
		}
		c.log.Debug("chat/finish not delivered", "requestId", fin.RequestID, "err", err)
	}
}

// sleepCtx waits d or until ctx ends, returning ctx's cause then.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
