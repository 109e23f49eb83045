package agentcli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool/textchat"
)

// answer is one running turn's answer, read by the router on its own
// goroutine from the queue the process's reader fills. It always ends
// with one EventDone or EventError.
type answer struct {
	b   *Backend
	c   *conn
	s   *sink
	ctx context.Context // the caller's
	// tctx adds TurnTimeout; idle fires after IdleTimeout without a line.
	tctx   context.Context
	cancel context.CancelFunc
	idle   *time.Timer

	parser *textchat.Parser
	events chat.Queue
	q      []*Message
	// ended: the closing event is queued; released: the process is free
	// again (its result came, or it went away); closed: Close ran.
	ended, released, closed bool

	session  string // from the turn's init line
	msgID    string // the API message being streamed
	streamed bool   // it streamed text (its full message is then not repeated)
	code     string // the error code of the turn's last assistant message
	codeText string
	hint     time.Duration // a rate limit's reset, when the CLI said
	warned   bool
}

var _ chat.Answer = (*answer)(nil)

func (b *Backend) newAnswer(ctx context.Context, c *conn, s *sink, t *chat.Turn) *answer {
	a := &answer{b: b, c: c, s: s, ctx: ctx, parser: textchat.NewParser(t), idle: time.NewTimer(b.d.cfg.IdleTimeout)}
	a.tctx, a.cancel = context.WithTimeout(ctx, b.d.cfg.TurnTimeout)
	return a
}

// Next returns the answer's next event; false past the closing one.
func (a *answer) Next() (chat.Event, bool) { return a.events.Next(&a.ended, a.step) }

// Buffered says whether events wait to be returned.
func (a *answer) Buffered() bool { return a.events.Len() > 0 }

// Close ends the turn: one not over is interrupted on the worker, whose
// process takes turns again once it said the turn ended. Safe to call
// twice.
func (a *answer) Close() {
	if a.closed {
		return
	}
	a.closed = true
	a.cancel()
	a.idle.Stop()
	if !a.released {
		a.interrupt()
	}
}

// interrupt asks the CLI to stop the turn and, in the background, waits
// (bounded) for its result before the process takes another turn.
func (a *answer) interrupt() {
	a.released = true
	b, c, s := a.b, a.c, a.s
	_ = c.write(map[string]any{"type": TypeControlRequest, "request_id": "pg-interrupt-" + c.label,
		"request": ControlRequest{Subtype: "interrupt"}})
	b.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), b.d.cfg.StopTimeout)
		defer cancel()
		m, err := c.await(ctx, s)
		c.listen(nil)
		switch {
		case err == nil:
			b.release(c, m.SessionID, false)
		case !c.alive():
			b.release(c, "", false)
		default:
			b.stuckConn(c)
		}
	})
}

// step waits for the process's next lines (or the end of waiting) and
// queues the events they make; at the end it queues the closing event.
func (a *answer) step() {
	select {
	case <-a.s.Wake:
		a.q = a.s.Take(a.q)
		a.idle.Reset(a.b.d.cfg.IdleTimeout)
		for _, m := range a.q {
			if a.handle(m) {
				a.ended = true
				return
			}
		}
		return
	case <-a.c.done:
		// Lines read before the process went away still count.
		for _, m := range a.s.Take(a.q) {
			if a.handle(m) {
				a.ended = true
				return
			}
		}
		a.free("", false)
		a.fail(fmt.Errorf("%s %s: %w", a.b.d.cfg.Profile.Name, a.b.name, a.c.gone()))
		return
	case <-a.idle.C:
		a.interrupt()
		a.fail(fmt.Errorf("%s %s: no line from the worker for %s: %w", a.b.d.cfg.Profile.Name, a.b.name,
			a.b.d.cfg.IdleTimeout, context.DeadlineExceeded))
		return
	case <-a.tctx.Done():
	}
	a.interrupt()
	err := a.ctx.Err()
	if err == nil {
		err = fmt.Errorf("%s %s: turn exceeded %s: %w", a.b.d.cfg.Profile.Name, a.b.name, a.b.d.cfg.TurnTimeout,
			context.DeadlineExceeded)
	}
	a.fail(err)
}

func (a *answer) fail(err error) {
	a.events.Push(chat.Event{Type: chat.EventError, Err: err})
	a.ended = true
}

// free hands the process back, holding session.
func (a *answer) free(session string, ok bool) {
	if a.released {
		return
	}
	a.released = true
	a.c.listen(nil)
	a.b.release(a.c, session, ok)
}

func (a *answer) emit(evs []chat.Event) {
	for _, ev := range evs {
		a.events.Push(ev)
	}
}

// handle turns one line into events; it reports whether the turn ended.
func (a *answer) handle(m *Message) bool {
	main := m.ParentToolUseID == nil || *m.ParentToolUseID == ""
	switch m.Type {
	case TypeSystem:
		if m.Subtype == SubtypeInit {
			a.session = m.SessionID
			if len(m.Tools) > 0 && !a.warned {
				a.warned = true
				a.b.log.Warn("the agent CLI offers built-in tools to the model", "tools", m.Tools)
			}
		}
	case TypeStreamEvent:
		if main && m.Event != nil {
			a.streamEvent(m.Event)
		}
	case TypeAssistant:
		if !main || m.Message == nil {
			return false
		}
		if m.Error != "" {
			a.code, a.codeText = m.Error, m.Message.Text()
		} else if m.Message.ID != a.msgID || !a.streamed {
			a.emit(a.parser.Text(m.Message.Text()))
		}
	case TypeRateLimit:
		if ri := m.RateLimitInfo; ri != nil && ri.Status == "rejected" && ri.ResetsAt > 0 {
			a.hint = max(0, time.Until(time.Unix(ri.ResetsAt, 0)))
		}
	case TypeResult:
		a.finish(m)
		return true
	}
	return false
}

// streamEvent reads one partial-message event: its text streams.
func (a *answer) streamEvent(ev *StreamEvent) {
	switch ev.Type {
	case "message_start":
		a.msgID, a.streamed = "", false
		if ev.Message != nil {
			a.msgID = ev.Message.ID
		}
	case "content_block_delta":
		if ev.Delta != nil && ev.Delta.Type == "text_delta" && ev.Delta.Text != "" {
			a.streamed = true
			a.emit(a.parser.Text(ev.Delta.Text))
		}
	}
}

// finish queues the turn's last events from its result.
func (a *answer) finish(m *Message) {
	session := m.SessionID
	if session == "" {
		session = a.session
	}
	if m.IsError || m.Subtype != SubtypeSuccess {
		a.free(session, false)
		a.events.Push(chat.Event{Type: chat.EventError, Err: a.b.turnError(a.ctx, m, a.code, a.codeText, a.hint)})
		return
	}
	a.free(session, true)
	evs, reason := a.parser.Finish()
	a.emit(evs)
	if reason == chat.FinishStop && m.StopReason != nil && *m.StopReason == "max_tokens" {
		reason = chat.FinishLength
	}
	var u chat.Usage
	if m.Usage != nil {
		// The neutral model has no cache counts: cached input is input.
		u = chat.Usage{InputTokens: m.Usage.InputTokens + m.Usage.CacheCreationInputTokens + m.Usage.CacheReadInputTokens,
			OutputTokens: m.Usage.OutputTokens}
	}
	a.events.Push(chat.Event{Type: chat.EventDone, Finish: reason, Usage: u, SessionID: session})
}

// turnError maps a failed turn's result to the neutral vocabulary: a
// refused login, a rate limit (with the CLI's reset time, when it said),
// else an upstream error with its status.
func (b *Backend) turnError(ctx context.Context, m *Message, code, codeText string, hint time.Duration) error {
	p := &b.d.cfg.Profile
	text := codeText
	if m.Result != nil && *m.Result != "" {
		text = *m.Result
	}
	if text == "" {
		text = strings.Join(m.Errors, "; ")
	}
	if text == "" {
		text = "the turn failed (" + m.Subtype + ")"
	}
	kind := p.Errors[code]
	switch {
	case kind != ErrorUpstream:
	case p.LoginText != nil && p.LoginText.MatchString(text):
		kind = ErrorLogin
	case p.RateLimitText != nil && p.RateLimitText.MatchString(text):
		kind = ErrorRateLimit
	}
	switch kind {
	case ErrorLogin:
		b.loggedOut(context.WithoutCancel(ctx))
		return fmt.Errorf("%s %s: %w: %s", p.Name, b.name, chat.ErrNotLoggedIn, text)
	case ErrorRateLimit:
		return &chat.RateLimitedError{RetryAfter: hint, Message: text}
	}
	status := 0
	if m.APIErrorStatus != nil {
		status = *m.APIErrorStatus
	}
	return &chat.UpstreamError{Status: status, Message: text}
}
