package qoder_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/worker"
)

func TestTurns(t *testing.T) {
	p := startPool(t, account(t, "q1", "", true))
	be := p.await(t, "q1", supervisor.StateReady).Backend
	if caps := be.Capabilities(); !caps.Models || !caps.Sessions || !caps.BrowserLogin {
		t.Errorf("capabilities %+v, want models, sessions and the device login", caps)
	}
	if st := p.status("q1"); st.Restarts != 0 {
		t.Errorf("%d restarts before the first turn", st.Restarts)
	}

	t.Run("streamed, with usage", func(t *testing.T) {
		r := mustOK(t, "plain turn", run(t, be, ask("hello there [[sim:chunks=4]]", "")))
		if r.text != "You said: hello there" {
			t.Errorf("answer %q, want the simulator's echo", r.text)
		}
		if r.done.SessionID == "" || r.done.Finish != chat.FinishStop || r.done.Usage.OutputTokens == 0 || r.done.Usage.InputTokens == 0 {
			t.Errorf("done %+v, want a session, stop and the result's token counts (QODER_EXPOSE_TOKEN_USAGE)", r.done)
		}
	})
	t.Run("tool round trip", func(t *testing.T) {
		tools := []chat.Tool{{Name: "get_weather", Description: "Weather for a city",
			Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)}}
		turn := ask(`weather? [[sim:call=get_weather {"city":"Paris"}]]`, "")
		turn.Tools = tools
		r := mustOK(t, "tool call", run(t, be, turn))
		if len(r.calls) != 1 || r.calls[0].Name != "get_weather" || r.done.Finish != chat.FinishToolCalls {
			t.Fatalf("answer %q, calls %+v, finish %s; want one get_weather call", r.text, r.calls, r.done.Finish)
		}
		next := &chat.Turn{SessionID: r.done.SessionID, Tools: tools, Messages: []chat.Message{
			{Role: chat.RoleTool, ToolCallID: r.calls[0].ID, Name: "get_weather", Content: "18C and sunny"}}}
		r2 := mustOK(t, "tool result", run(t, be, next))
		if r2.text != "Tool get_weather returned: 18C and sunny" || r2.done.SessionID != r.done.SessionID {
			t.Errorf("after the result: %q on %s, want the result quoted on %s", r2.text, r2.done.SessionID, r.done.SessionID)
		}
	})
	t.Run("follow-ups continue the session", func(t *testing.T) {
		session := ""
		for i := 1; i <= 4; i++ {
			r := mustOK(t, "turn", run(t, be, ask("[[sim:whoami]]", session)))
			if i > 1 && (r.done.SessionID != session || !strings.Contains(r.text, "reply=true")) {
				t.Fatalf("turn %d: %q on %s, want the session %s continued", i, r.text, r.done.SessionID, session)
			}
			session = r.done.SessionID
		}
	})
	t.Run("a caller's command is text", func(t *testing.T) { commandsAreText(t, be) })
	t.Run("no file is attached", func(t *testing.T) { noFileAttached(t, p, be) })
}

// commandsAreText: a caller's message that opens with "/" reaches the
// model as text, and the session goes on.
func commandsAreText(t *testing.T, be worker.Backend) {
	r := mustOK(t, "first", run(t, be, ask("[[sim:whoami]]", "")))
	for _, cmd := range []string{"/clear please", "  /clear", "\ufeff/help"} {
		r2 := mustOK(t, cmd, run(t, be, ask(cmd, r.done.SessionID)))
		if !strings.Contains(r2.text, strings.TrimLeft(cmd, " \ufeff")) {
			t.Errorf("a caller's %q answered %q, want the model to read it as text", cmd, r2.text)
		}
	}
	r3 := mustOK(t, "after", run(t, be, ask("[[sim:whoami]]", r.done.SessionID)))
	if !strings.Contains(r3.text, "turn=5 reply=true") {
		t.Errorf("after a caller's commands: %q, want the session kept (turn 5)", r3.text)
	}
}

// noFileAttached: a caller's @path mentions read no file into the prompt.
func noFileAttached(t *testing.T, p *pool, be worker.Backend) {
	w, _ := p.sup.Worker("q1")
	secret := filepath.Join(w.WorkDir(), "config", ".auth", "user")
	rel := "config/.auth/user"
	if err := os.WriteFile(filepath.Join(w.WorkDir(), "example.com"), []byte("leaked"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, prompt := range []string{"what is @" + secret, "and @" + rel, `quoted @"` + rel + `"`,
		"mail me@example.com", "home @~/x"} {
		r := mustOK(t, prompt, run(t, be, ask(prompt, "")))
		if strings.Contains(r.text, "[attached") {
			t.Errorf("%q answered %q: a file was read into the prompt", prompt, r.text)
		}
	}
}

func TestTurnErrors(t *testing.T) {
	p := startPool(t, account(t, "q1", "", true))
	be := p.await(t, "q1", supervisor.StateReady).Backend
	r := run(t, be, ask("[[sim:ratelimit]]", ""))
	if _, ok := errors.AsType[*chat.RateLimitedError](r.err); !ok {
		t.Errorf("rate limit: %v, want a RateLimitedError", r.err)
	}
	r = run(t, be, ask("[[sim:error]]", ""))
	if ue, ok := errors.AsType[*chat.UpstreamError](r.err); !ok || !strings.Contains(ue.Message, "could not be completed") {
		t.Errorf("failed request: %v, want an upstream error with the CLI's text", r.err)
	}
	// A login refused mid-life: the account takes no more turns, and its
	// next start, the only one, runs the device login.
	r = run(t, be, ask("[[sim:logout]]", ""))
	if !errors.Is(r.err, chat.ErrNotLoggedIn) {
		t.Fatalf("logged out: %v, want ErrNotLoggedIn", r.err)
	}
	if _, err := be.Start(t.Context(), ask("again", "")); !errors.Is(err, chat.ErrNotLoggedIn) || !errors.Is(err, chat.ErrNotSent) {
		t.Errorf("a turn while logged out: %v, want ErrNotLoggedIn before sending", err)
	}
	testenv.WaitFor(t, 20*time.Second, "q1 running its device login", func() bool {
		st := p.status("q1")
		u, _ := loginURL(st)
		return st.State == supervisor.StateNeedsLogin && u != ""
	})
	if st := p.status("q1"); st.Restarts != 1 {
		t.Errorf("%d restarts after the refused login, want 1", st.Restarts)
	}
}
