package agentcli_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/agentcli"
	"github.com/poolgate/poolgate/pool/supervisor"
)

func TestTurns(t *testing.T) {
	p := startPool(t, nil, account(t, "a1", "sk-test-key"))
	be := p.ready(t, "a1")
	if caps := be.Capabilities(); !caps.Models || !caps.Sessions || !caps.BrowserLogin {
		t.Errorf("capabilities %+v, want models, sessions and a browser login", caps)
	}
	ms, err := be.Models(context.Background())
	if err != nil || len(ms) == 0 || ms[0].ID != "default" {
		t.Errorf("models %v (%v), want the initialize answer's, default first", ms, err)
	}

	t.Run("streamed", func(t *testing.T) {
		r := mustOK(t, "plain turn", run(t, be, ask("hello there [[sim:chunks=4]]", "")))
		if r.text != "You said: hello there" || r.n < 5 {
			t.Errorf("answer %q in %d events, want the sim's echo in 4 deltas and a done", r.text, r.n)
		}
		if r.done.SessionID == "" || r.done.Finish != chat.FinishStop || r.done.Usage.OutputTokens == 0 || r.done.Usage.InputTokens == 0 {
			t.Errorf("done %+v, want a session, stop and the result's usage", r.done)
		}
	})
	t.Run("whole", func(t *testing.T) {
		turn := ask("in one piece", "")
		turn.Whole = true
		mustOK(t, "whole turn", run(t, be, turn))
	})
	t.Run("tool round trip", func(t *testing.T) {
		tools := []chat.Tool{{Name: "get_weather", Description: "Weather for a city",
			Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)},
			{Name: "get_time", Parameters: json.RawMessage(`{"type":"object"}`)}}
		turn := ask(`weather? [[sim:call=get_weather {"city":"Paris"}]]`, "")
		turn.Tools = tools
		r := mustOK(t, "tool call", run(t, be, turn))
		if len(r.calls) != 1 || r.calls[0].Name != "get_weather" || r.calls[0].Arguments != `{"city":"Paris"}` ||
			r.done.Finish != chat.FinishToolCalls || r.text != "" {
			t.Fatalf("answer %q, calls %+v, finish %s; want one get_weather call", r.text, r.calls, r.done.Finish)
		}
		next := &chat.Turn{SessionID: r.done.SessionID, Tools: tools, Messages: []chat.Message{
			{Role: chat.RoleTool, ToolCallID: r.calls[0].ID, Name: "get_weather", Content: "18C and sunny"}}}
		r2 := mustOK(t, "tool result", run(t, be, next))
		if r2.text != "Tool get_weather returned: 18C and sunny" || r2.done.SessionID != r.done.SessionID {
			t.Errorf("after the result: %q on session %s, want the result quoted on %s", r2.text, r2.done.SessionID, r.done.SessionID)
		}
	})
	t.Run("slash text is text", func(t *testing.T) {
		r := mustOK(t, "first", run(t, be, ask("[[sim:whoami]]", "")))
		r2 := mustOK(t, "slash", run(t, be, ask("/clear please", r.done.SessionID)))
		if r2.text != "You said: /clear please" {
			t.Errorf("a caller's /clear answered %q, want it read as text", r2.text)
		}
		r3 := mustOK(t, "after", run(t, be, ask("[[sim:whoami]]", r.done.SessionID)))
		if !strings.Contains(r3.text, "turn=3 reply=true") {
			t.Errorf("after a caller's /clear: %q, want the session kept (turn 3)", r3.text)
		}
	})
	t.Run("file mentions off", func(t *testing.T) {
		r := mustOK(t, "mention", run(t, be, ask("what is @/etc/hostname", "")))
		if strings.Contains(r.text, "[attached") {
			t.Errorf("answer %q: a caller's @file was read into the prompt", r.text)
		}
	})
}

// Ten turns of one conversation, each continuing the CLI session of the
// one before.
func TestFollowUpsContinueTheSession(t *testing.T) {
	p := startPool(t, nil, account(t, "a1", "sk-test-key"))
	be := p.ready(t, "a1")
	session := ""
	for i := 1; i <= 10; i++ {
		r := mustOK(t, "turn", run(t, be, ask("[[sim:whoami]]", session)))
		if want := "turn=" + strconv.Itoa(i) + " "; !strings.Contains(r.text, want) || session != "" && r.done.SessionID != session {
			t.Fatalf("turn %d answered %q on session %s, want %q on %s", i, r.text, r.done.SessionID, want, session)
		}
		session = r.done.SessionID
	}
}

// Errors map to the neutral vocabulary.
func TestTurnErrors(t *testing.T) {
	p := startPool(t, nil, account(t, "a1", "sk-test-key"))
	be := p.ready(t, "a1")
	r := run(t, be, ask("[[sim:error]]", ""))
	if ue, ok := errorsAs[*chat.UpstreamError](r.err); !ok || ue.Status != 500 {
		t.Errorf("[[sim:error]]: %v, want an upstream error 500", r.err)
	}
	r = run(t, be, ask("[[sim:ratelimit]]", ""))
	if rl, ok := errorsAs[*chat.RateLimitedError](r.err); !ok || rl.RetryAfter != 0 {
		t.Errorf("[[sim:ratelimit]]: %v, want a rate limit without a hint", r.err)
	}
	r = run(t, be, ask("[[sim:ratelimit=90s]]", ""))
	if rl, ok := errorsAs[*chat.RateLimitedError](r.err); !ok || rl.RetryAfter < 80*time.Second || rl.RetryAfter > 90*time.Second {
		t.Errorf("[[sim:ratelimit=90s]]: %v, want a rate limit with the event's reset time", r.err)
	}
	mustOK(t, "after the errors", run(t, be, ask("still here", "")))
	if st := p.status("a1"); st.State != supervisor.StateReady || st.Restarts != 0 {
		t.Errorf("after failed turns: %s with %d restarts, want ready, none", st.State, st.Restarts)
	}
}

// A turn whose caller goes away is interrupted; the process then takes the
// conversation's next turn.
func TestCallerGoneInterrupts(t *testing.T) {
	p := startPool(t, nil, account(t, "a1", "sk-test-key"))
	be := p.ready(t, "a1")
	first := mustOK(t, "first", run(t, be, ask("[[sim:whoami]]", "")))
	ctx, cancel := context.WithCancel(context.Background())
	a, err := be.Start(ctx, ask("slow [[sim:words=200]] [[sim:chunk-delay=50ms]]", first.done.SessionID))
	if err != nil {
		t.Fatal(err)
	}
	if ev, ok := a.Next(); !ok || ev.Type != chat.EventText {
		t.Fatalf("first event %+v, want text", ev)
	}
	cancel()
	r := read(a)
	a.Close()
	if !errors.Is(r.err, context.Canceled) {
		t.Errorf("a cancelled turn ended with %v, want the context's error", r.err)
	}
	r2 := mustOK(t, "after the interrupt", run(t, be, ask("[[sim:whoami]]", first.done.SessionID)))
	if r2.done.SessionID != first.done.SessionID {
		t.Errorf("after an interrupt the session is %s, want %s continued", r2.done.SessionID, first.done.SessionID)
	}
}

// A crashed worker's turn ends with the worker gone, and the worker comes
// back; a hung turn ends at the idle timeout.
func TestHungAndCrashedTurns(t *testing.T) {
	p := startPool(t, func(c *agentcli.Config) { c.IdleTimeout = 500 * time.Millisecond },
		account(t, "a1", "sk-test-key"))
	be := p.ready(t, "a1")
	first := mustOK(t, "first", run(t, be, ask("hello", "")))
	pid := p.status("a1").PID
	r := run(t, be, ask("[[sim:crash]]", first.done.SessionID)) // on the supervised process, which holds it
	if !errors.Is(r.err, chat.ErrWorkerGone) {
		t.Errorf("a crashed worker's turn: %v, want ErrWorkerGone", r.err)
	}
	testenv.WaitFor(t, 10*time.Second, "a new process", func() bool {
		st := p.status("a1")
		return st.State == supervisor.StateReady && st.PID != pid
	})

	be = p.ready(t, "a1")
	start := time.Now()
	r = run(t, be, ask("[[sim:hang]]", ""))
	if !errors.Is(r.err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("a hung turn: %v after %s, want the idle deadline", r.err, time.Since(start))
	}
	mustOK(t, "after the hang", run(t, be, ask("next", "")))
}
