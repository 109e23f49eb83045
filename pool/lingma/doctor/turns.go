package doctor

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/lingmarpc"
	"github.com/poolgate/poolgate/pool/lingma"
)

// turns runs the checks that need a logged-in worker.
func (r *run) turns(ctx context.Context, c *lingmarpc.Conn) {
	const pong = "Reply with exactly: pong"
	normal := r.turn(ctx, c, plain(pong), turnOpts{drv: r.driver(lingma.Config{Mode: lingma.ModeNormal})})
	r.askMode(lingma.ModeNormal, normal)
	asChat := r.turn(ctx, c, plain(pong), turnOpts{drv: r.driver(lingma.Config{Mode: lingma.ModeChat})})
	r.askMode(lingma.ModeChat, asChat)
	// The other turns go in a mode the worker took.
	mode, first := lingma.ModeNormal, normal
	if !normal.accepted() && asChat.accepted() {
		mode, first = lingma.ModeChat, asChat
	}
	r.replyShape(first)
	r.finished(first)
	sid, _ := first.finish["sessionId"].(string)
	follow := plain("Repeat your previous reply exactly.")
	follow.SessionID = sid
	var again *seen
	if sid != "" {
		again = r.turn(ctx, c, follow, turnOpts{drv: r.driver(lingma.Config{Mode: mode})})
	}
	r.reuse(first, again)
	tool := r.turn(ctx, c, &chat.Turn{Agent: true, Messages: []chat.Message{{Role: chat.RoleUser,
		Content: "Read the file " + checkFile + " in the workspace and tell me its first line."}}}, turnOpts{drv: r.driver(lingma.Config{})})
	r.tool(tool)
	stop := r.turn(ctx, c, plain("Count from 1 to 300, one number a line."), turnOpts{drv: r.driver(lingma.Config{Mode: mode}), stop: true})
	r.stopped(stop)
	r.workerRequests(normal, asChat, again, tool, stop)
	r.deleted(ctx, c, sid)
}

// askMode: a plain turn in the mode is taken and ends with status 200.
func (r *run) askMode(mode string, s *seen) {
	check := "ask mode " + mode
	switch {
	case !s.accepted():
		r.add(check, Differs, "refused: %s", s.refusal())
	case s.finish == nil:
		r.add(check, Differs, "taken, but the turn did not end: %s", s.ended)
	case fmt.Sprint(s.finish["statusCode"]) != "200":
		r.add(check, Differs, "finished with status %v: %v", s.finish["statusCode"], s.finish)
	default:
		r.add(check, Holds, "answered %q in %s", clip(s.text.String()), s.took.Round(time.Millisecond))
	}
}

// replyShape: chat/ask is answered {success, errorCode, errorMessage}.
func (r *run) replyShape(s *seen) {
	if s.reply != nil && !s.accepted() {
		r.add("chat/ask reply", NotChecked, "no plain turn was taken: %s", s.refusal())
		return
	}
	_, msg := s.reply["errorMessage"]
	_, old := s.reply["errorMsg"]
	_, ok := s.reply["success"]
	switch {
	case s.reply == nil:
		r.add("chat/ask reply", Differs, "%s", s.refusal())
	case old && !msg:
		r.add("chat/ask reply", Differs, "its error text is named errorMsg, not errorMessage: %v", s.reply)
	case !ok || !msg:
		r.add("chat/ask reply", Differs, "not {success, errorCode, errorMessage}: %v", s.reply)
	default:
		r.add("chat/ask reply", Holds, "{success, errorCode, errorMessage}")
	}
}

// finished: the turn ends with chat/finish carrying the plugin's fields.
func (r *run) finished(s *seen) {
	if !s.accepted() {
		r.add("chat/finish", NotChecked, "no plain turn was taken")
		return
	}
	if s.finish == nil {
		why := s.ended
		if s.stepEnd {
			why = fmt.Sprintf("none came within %s of the last step callback (step_end); the driver ends a turn at "+
				"chat/finish and would wait lingma.idle_timeout", r.cfg.FinishWait)
		}
		r.add("chat/finish", Differs, "%s", why)
		return
	}
	var missing []string
	for _, k := range []string{"requestId", "sessionId", "reason", "statusCode", "fullAnswer"} {
		if _, ok := s.finish[k]; !ok {
			missing = append(missing, k)
		}
	}
	if sid, _ := s.finish["sessionId"].(string); len(missing) > 0 || sid == "" {
		r.add("chat/finish", Differs, "without %s (or an empty sessionId): %v", strings.Join(missing, ", "), s.finish)
		return
	}
	r.add("chat/finish", Holds, "status %v, reason %v, a session id", s.finish["statusCode"], s.finish["reason"])
}

// reuse: a follow-up with isReply and the session id stays in the session.
func (r *run) reuse(first, again *seen) {
	sid, _ := first.finish["sessionId"].(string)
	switch {
	case again == nil:
		r.add("reuse", NotChecked, "the first turn gave no session id")
	case !again.accepted():
		r.add("reuse", Differs, "the follow-up (isReply, session %s) was refused: %s", sid, again.refusal())
	case again.finish == nil:
		r.add("reuse", Differs, "the follow-up did not end: %s", again.ended)
	case again.finish["sessionId"] != sid:
		r.add("reuse", Differs, "the follow-up came back in session %v, not %s: the worker did not continue it",
			again.finish["sessionId"], sid)
	default:
		repeats := "does not repeat"
		if strings.Contains(strings.ToLower(again.text.String()), "pong") {
			repeats = "repeats"
		}
		r.add("reuse", Holds, "the same session; its answer %s the first one", repeats)
	}
}

// tool: in agent mode the worker asks for its own tool with the plugin's
// fields, takes the driver's unsupported answer and finishes.
func (r *run) tool(s *seen) {
	switch {
	case !s.accepted():
		r.add("tool/invoke", Differs, "the agent-mode ask was refused: %s", s.refusal())
	case len(s.invokes) == 0 && s.finish != nil:
		r.add("tool/invoke", NotChecked, "the worker answered in agent mode without asking for a tool")
	case len(s.invokes) == 0:
		r.add("tool/invoke", Differs, "the agent-mode turn did not end: %s", s.ended)
	case s.invokeShape != "":
		r.add("tool/invoke", Differs, "%s", s.invokeShape)
	case s.finish == nil:
		r.add("tool/invoke", Differs, "after the unsupported answer to %s the worker did not finish: %s",
			strings.Join(s.invokes, "; "), s.ended)
	default:
		r.add("tool/invoke", Holds, "asked for %s, took the unsupported answer, finished with status %v",
			strings.Join(s.invokes, "; "), s.finish["statusCode"])
	}
}

// stopped: chat/stop is taken and ends the turn.
func (r *run) stopped(s *seen) {
	switch {
	case !s.accepted():
		r.add("chat/stop", Differs, "the ask was refused: %s", s.refusal())
	case !s.stopped:
		r.add("chat/stop", NotChecked, "the turn ended before its first answer: %v", s.finish)
	case s.stopErr != "":
		r.add("chat/stop", Differs, "chat/stop was answered %s", s.stopErr)
	case s.finish != nil:
		r.add("chat/stop", Holds, "the turn ended: finish reason %v, status %v", s.finish["reason"], s.finish["statusCode"])
	case strings.HasPrefix(s.ended, "nothing for"):
		r.add("chat/stop", Holds, "the worker went quiet (no chat/finish)")
	default:
		r.add("chat/stop", Differs, "the turn went on: %s", s.ended)
	}
}

// workerRequests: the worker's messages of a turn are requests with ids,
// each answered.
func (r *run) workerRequests(turns ...*seen) {
	var reqs, notes []string
	for _, s := range turns {
		if s != nil {
			reqs, notes = append(reqs, s.requests...), append(notes, s.notifications...)
		}
	}
	if len(notes) > 0 {
		r.add("worker requests", Differs, "sent without an id (notifications): %s", strings.Join(sorted(notes), ", "))
		return
	}
	r.add("worker requests", Holds, "requests, each answered: %s", strings.Join(sorted(reqs), ", "))
}

// deleted: chat/deleteSessionById is taken.
func (r *run) deleted(ctx context.Context, c *lingmarpc.Conn, sid string) {
	if sid == "" {
		r.add("chat/deleteSessionById", NotChecked, "no session to delete")
		return
	}
	m, err := c.Call(ctx, 10*time.Second, "chat/deleteSessionById", map[string]string{"sessionId": sid})
	switch {
	case err != nil:
		r.add("chat/deleteSessionById", Differs, "%v", err)
	case m.Error != nil:
		r.add("chat/deleteSessionById", Differs, "answered with an error: %v", m.Error)
	default:
		r.add("chat/deleteSessionById", Holds, "%s", clip(string(m.Result)))
	}
}

func clip(s string) string {
	if r := []rune(s); len(r) > 60 {
		return string(r[:60]) + "..."
	}
	return s
}
