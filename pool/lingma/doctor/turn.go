package doctor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/lingmarpc"
	"github.com/poolgate/poolgate/pool/lingma"
)

// seen is what the worker did in one turn.
type seen struct {
	reply    map[string]any   // chat/ask's answer; nil when it was a JSON-RPC error
	replyErr *lingmarpc.Error // that error
	text     strings.Builder
	// requests are the worker's requests of the turn, by method, and
	// notifications the methods that came without an id.
	requests, notifications []string
	finish                  map[string]any // chat/finish's params; nil: none came
	stepEnd                 bool
	// invokes describe the tool/invoke requests ("read_file, sync"),
	// invokeShape what was wrong with one's shape.
	invokes     []string
	invokeShape string
	// stopped: chat/stop was sent at the first answer; stopErr is its
	// answer's error.
	stopped bool
	stopErr string
	// ended says why following the turn stopped without a finish.
	ended string
	took  time.Duration
}

func (s *seen) accepted() bool { return s.reply != nil && s.reply["success"] != false }

// refusal is what a refused ask said.
func (s *seen) refusal() string {
	if s.replyErr != nil {
		return fmt.Sprintf("a JSON-RPC error %d: %s", s.replyErr.Code, s.replyErr.Message)
	}
	return fmt.Sprintf("%v", s.reply)
}

// turnOpts shape one turn.
type turnOpts struct {
	drv  *lingma.Driver // asks as this driver does
	stop bool           // send chat/stop at the first answer
}

// turn asks t and follows the turn to its chat/finish, answering what the
// worker asks on the way as the driver does.
func (r *run) turn(ctx context.Context, c *lingmarpc.Conn, t *chat.Turn, o turnOpts) *seen {
	start := time.Now()
	reqID := "doctor-" + randomHex()
	s := &seen{}
	defer func() { s.took = time.Since(start) }()
	m, err := c.Call(ctx, 30*time.Second, "chat/ask", o.drv.Ask(t, reqID))
	if err != nil {
		s.ended = err.Error()
		return s
	}
	if s.replyErr = m.Error; m.Error == nil {
		_ = json.Unmarshal(m.Result, &s.reply)
	}
	if !s.accepted() {
		return s
	}
	f := follower{r: r, c: c, s: s, reqID: reqID, opts: o}
	f.follow(ctx)
	if s.finish == nil {
		// Leave no turn running behind the next check.
		_, _ = c.Call(ctx, 5*time.Second, "chat/stop", map[string]string{"requestId": reqID})
	}
	return s
}

// follower reads one turn's messages.
type follower struct {
	r     *run
	c     *lingmarpc.Conn
	s     *seen
	reqID string
	opts  turnOpts
	stop  <-chan *lingmarpc.Message // chat/stop's answer
	quiet time.Duration             // after a stop or the last step: how long silence may last
}

func (f *follower) follow(ctx context.Context) {
	overall := time.NewTimer(f.r.cfg.Timeout)
	defer overall.Stop()
	idle := time.NewTimer(f.r.cfg.Timeout)
	defer idle.Stop()
	for f.s.finish == nil {
		select {
		case m := <-f.c.In:
			f.handle(m)
			if f.quiet > 0 {
				idle.Reset(f.quiet)
			}
		case <-idle.C:
			f.s.ended = fmt.Sprintf("nothing for %s after %s", f.quiet, f.after())
			f.stopAnswer()
			return
		case <-overall.C:
			f.s.ended = fmt.Sprintf("the turn did not end within %s", f.r.cfg.Timeout)
			return
		case <-f.c.Done():
			f.s.ended = lingmarpc.ErrGone.Error()
			return
		case <-ctx.Done():
			f.s.ended = ctx.Err().Error()
			return
		}
	}
	f.stopAnswer()
}

func (f *follower) after() string {
	if f.s.stopped {
		return "chat/stop"
	}
	return "the last step callback"
}

// stopAnswer reads chat/stop's answer, when one was sent.
func (f *follower) stopAnswer() {
	if f.stop == nil {
		return
	}
	select {
	case m := <-f.stop:
		if m.Error != nil {
			f.s.stopErr = m.Error.Message
		}
	case <-time.After(5 * time.Second):
		f.s.stopErr = "no answer within 5s"
	}
}

// params are the fields of a worker message the doctor reads.
type params struct {
	RequestID  string         `json:"requestId"`
	SessionID  string         `json:"sessionId"`
	Text       string         `json:"text"`
	Step       string         `json:"step"`
	ToolCallID string         `json:"toolCallId"`
	Name       string         `json:"name"`
	Async      *bool          `json:"async"`
	Parameters map[string]any `json:"parameters"`
}

// handle takes one worker message of the turn (or of none).
func (f *follower) handle(m *lingmarpc.Message) {
	var p params
	_ = json.Unmarshal(m.Params, &p)
	mine := p.RequestID == f.reqID || p.RequestID == ""
	if mine {
		if len(m.ID) > 0 {
			f.s.requests = append(f.s.requests, m.Method)
		} else {
			f.s.notifications = append(f.s.notifications, m.Method)
		}
	}
	switch {
	case m.Method == "tool/invoke":
		f.invoke(m, &p)
		return
	case m.Method == "chat/answer" && mine:
		f.s.text.WriteString(p.Text)
		if f.opts.stop && !f.s.stopped {
			f.s.stopped, f.quiet = true, 5*time.Second
			f.stop, _ = f.c.Request("chat/stop", map[string]string{"requestId": f.reqID})
		}
	case m.Method == "chat/process_step_callback" && mine && p.Step == "step_end":
		f.s.stepEnd, f.quiet = true, f.r.cfg.FinishWait
	case m.Method == "chat/finish" && p.RequestID == f.reqID:
		_ = json.Unmarshal(m.Params, &f.s.finish)
	}
	if len(m.ID) > 0 {
		_ = f.c.Reply(m.ID, map[string]any{})
	}
}

// invoke answers the worker's own tool as the driver does (unsupported),
// noting the request's shape.
func (f *follower) invoke(m *lingmarpc.Message, p *params) {
	mode := "sync"
	if p.Async != nil && *p.Async {
		mode = "async"
	}
	f.s.invokes = append(f.s.invokes, p.Name+", "+mode)
	var missing []string
	for k, ok := range map[string]bool{"requestId": p.RequestID != "", "toolCallId": p.ToolCallID != "",
		"name": p.Name != "", "parameters": p.Parameters != nil, "async": p.Async != nil} {
		if !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 && f.s.invokeShape == "" {
		f.s.invokeShape = fmt.Sprintf("tool/invoke without %s: %s", strings.Join(missing, ", "), m.Params)
	}
	if len(m.ID) == 0 {
		return
	}
	if mode == "sync" {
		_ = f.c.Reply(m.ID, lingma.UnsupportedResult("", p.ToolCallID, p.Name))
		return
	}
	_ = f.c.Reply(m.ID, map[string]any{})
	_, _ = f.c.Request("tool/invokeResult", lingma.UnsupportedResult(p.RequestID, p.ToolCallID, p.Name))
}

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
