package lingma

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/lingmarpc"
	"github.com/poolgate/poolgate/internal/testenv"
)

// TestAskMode: a turn goes in agent mode when it asks for the agent (tools,
// tool history or an agent model, which the router says in Turn.Agent) or
// when the driver's default is agent; else in the configured plain mode,
// "normal" as seen on the wire unless the operator says otherwise. The
// prompt goes once, in questionText, unless chatContext is asked to repeat
// it.
func TestAskMode(t *testing.T) {
	w := startSim(t, "--logged-in")
	const q = "[[sim:ask]]"
	tests := []struct {
		name string
		cfg  Config
		turn chat.Turn
		want string
	}{
		{name: "normal default", turn: chat.Turn{Messages: user(q)},
			want: "mode=normal session_type=chat model= tools=none endpoint= context=null"},
		{name: "chat configured", cfg: Config{Mode: ModeChat}, turn: chat.Turn{Messages: user(q)},
			want: "mode=chat session_type=chat model= tools=none endpoint= context=null"},
		{name: "prompt repeated", cfg: Config{ChatContext: ContextPrompt}, turn: chat.Turn{Messages: user(q)},
			want: "mode=normal session_type=chat model= tools=none endpoint= context=text:" + strconv.Itoa(len(q))},
		{name: "agent asked", turn: chat.Turn{Messages: user(q), Agent: true, Model: "kmodel"},
			want: "mode=agent session_type=assistant model=kmodel tools=none endpoint= context=null"},
		{name: "agent session type", cfg: Config{AgentSessionType: "developer"}, turn: chat.Turn{Messages: user(q), Agent: true},
			want: "mode=agent session_type=developer model= tools=none endpoint= context=null"},
		{name: "agent default", cfg: Config{Mode: ModeAgent}, turn: chat.Turn{Messages: user(q)},
			want: "mode=agent session_type=assistant model= tools=none endpoint= context=null"},
		{name: "emulated tools", turn: chat.Turn{Messages: user(q), Agent: true, Tools: []chat.Tool{weatherTool}},
			want: "mode=agent session_type=assistant model= tools=prompt:1 endpoint= context=null"},
		{name: "auto without the capability", cfg: Config{ToolMode: ToolsAuto},
			turn: chat.Turn{Messages: user(q), Agent: true, Tools: []chat.Tool{weatherTool}},
			want: "mode=agent session_type=assistant model= tools=prompt:1 endpoint= context=null"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := connect(t, w, tt.cfg)
			a := runTurn(t, c, &tt.turn)
			if a.err != nil || a.text != tt.want {
				t.Errorf("answer = %q, %v; want %q", a.text, a.err, tt.want)
			}
		})
	}
}

// TestAskParams: chat/ask carries every field of the minimal request seen
// on the wire, in its order, with the same empty values.
func TestAskParams(t *testing.T) {
	params := make(chan string, 1)
	f := newFake(t, func(fc *fakeConn, m *lingmarpc.Message) {
		if m.Method == "chat/ask" {
			params <- string(m.Params)
		}
		fc.reply(m.ID, map[string]any{"success": false, "errorCode": "", "errorMessage": "seen"})
	})
	c := fakeClient(t, f, Config{})
	_, _ = c.Start(context.Background(), &chat.Turn{RequestID: "r", Messages: user("Reply with exactly: pong")})
	want := `{"requestId":"r-1","chatTask":"FREE_INPUT","chatContext":null,"sessionId":"","codeLanguage":"",` +
		`"isReply":false,"source":1,"questionText":"Reply with exactly: pong","stream":true,"taskDefinitionType":"",` +
		`"extra":null,"sessionType":"chat","targetAgent":"","pluginPayloadConfig":null,"mode":"normal","shellType":"",` +
		`"customModel":null}`
	if got := <-params; got != want {
		t.Errorf("chat/ask params\n%s\nwant\n%s", got, want)
	}
}

// TestNativeTools: with a worker that advertises tool/invoke, the tools go
// to it as data (the prompt carries no tools section), its tool/invoke
// requests come back as the turn's calls, and the results go back with the
// conversation in a new session: the worker's session holds its own
// record of the calls, which the default reuse policy does not continue.
func TestNativeTools(t *testing.T) {
	for _, mode := range []string{ToolsAuto, ToolsNative} {
		t.Run(mode, func(t *testing.T) {
			w := startSim(t, "--logged-in", "--native-tools")
			c := connect(t, w, Config{ToolMode: mode})
			probe := runTurn(t, c, &chat.Turn{Messages: user("[[sim:ask]]"), Agent: true, Tools: []chat.Tool{weatherTool}})
			if !strings.HasPrefix(probe.text, "mode=agent session_type=assistant model= tools=native:1 ") {
				t.Fatalf("ask = %q, %v; want the tools passed natively", probe.text, probe.err)
			}
			msgs := []chat.Message{{Role: chat.RoleSystem, Content: "Be brief."}, {Role: chat.RoleUser, Content: "Paris"}}
			a := runTurn(t, c, &chat.Turn{Messages: msgs, Agent: true, Tools: []chat.Tool{weatherTool}})
			if a.err != nil || len(a.calls) != 1 || a.text != "" || a.done.Finish != chat.FinishToolCalls {
				t.Fatalf("answer = %q %+v %+v %v; want one native call", a.text, a.calls, a.done, a.err)
			}
			call := a.calls[0]
			if call.Name != "get_weather" || call.Arguments != `{"city":"Paris"}` || call.ID != "call_sim_1_0" {
				t.Errorf("call = %+v, want the worker's get_weather call with its id", call)
			}
			next := []chat.Message{
				{Role: chat.RoleAssistant, ToolCalls: a.calls},
				{Role: chat.RoleTool, ToolCallID: call.ID, Content: "18C and sunny"},
			}
			if a.done.SessionID != "" {
				t.Errorf("a native tool turn handed out session %q, want none", a.done.SessionID)
			}
			b := runTurn(t, c, &chat.Turn{Messages: append(msgs, next...), Agent: true, Tools: []chat.Tool{weatherTool}})
			if b.err != nil || b.text != "Tool get_weather returned: 18C and sunny" || b.done.Finish != chat.FinishStop {
				t.Errorf("result turn = %q %+v %v", b.text, b.done, b.err)
			}
		})
	}
}

// TestNativeInvokeEdges: a worker's own tools are refused; a worker that
// waits for the result instead of finishing is stopped after ToolSettle with
// the calls standing; a turn that ends in an error after its calls still
// answers with them.
func TestNativeInvokeEdges(t *testing.T) {
	invoke := func(fc *fakeConn, id, reqID, name string) {
		fc.notify(id, "tool/invoke", map[string]any{"requestId": reqID, "toolCallId": "tc-" + id, "name": name,
			"parameters": map[string]string{"city": "Oslo"}})
	}
	tests := []struct {
		name      string
		then      func(fc *fakeConn, reqID string)
		wantCalls []string
		wantText  string
		wantStop  bool
		requests  int // the fake's requests, each to be answered
	}{
		{name: "worker's own tool refused", then: func(fc *fakeConn, reqID string) {
			invoke(fc, "5", reqID, "read_file")
			fc.notify(`6`, "chat/finish", map[string]any{"requestId": reqID, "statusCode": 200, "fullAnswer": "done"})
		}, wantText: "done", requests: 2},
		{name: "waits for the result", then: func(fc *fakeConn, reqID string) {
			invoke(fc, "5", reqID, "get_weather")
		}, wantCalls: []string{"tc-5"}, wantStop: true, requests: 1},
		{name: "error after the calls", then: func(fc *fakeConn, reqID string) {
			invoke(fc, "5", reqID, "get_weather")
			invoke(fc, "6", reqID, "get_weather")
			fc.notify(`7`, "chat/finish", map[string]any{"requestId": reqID, "statusCode": 499, "reason": "cancelled"})
		}, wantCalls: []string{"tc-5", "tc-6"}, requests: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, askThen(tt.then))
			c := fakeClient(t, f, Config{ToolMode: ToolsNative, ToolSettle: 50 * time.Millisecond})
			a := runTurn(t, c, &chat.Turn{Messages: user("weather?"), Agent: true, Tools: []chat.Tool{weatherTool}})
			var ids []string
			for _, call := range a.calls {
				ids = append(ids, call.ID)
				if call.Arguments != `{"city":"Oslo"}` {
					t.Errorf("call %s arguments %s", call.ID, call.Arguments)
				}
			}
			if a.err != nil || !slices.Equal(ids, tt.wantCalls) || a.text != tt.wantText {
				t.Fatalf("answer = %q %v %v, want %q %v", a.text, ids, a.err, tt.wantText, tt.wantCalls)
			}
			if len(tt.wantCalls) > 0 && a.done.Finish != chat.FinishToolCalls {
				t.Errorf("finish = %q, want tool_calls", a.done.Finish)
			}
			if tt.wantStop {
				waitStop(t, f) // sent as the turn ends, so it may still be on its way
			}
			methods, replies := f.seen()
			if got := slices.Contains(methods, "chat/stop"); got != tt.wantStop {
				t.Errorf("chat/stop sent = %v, want %v", got, tt.wantStop)
			}
			// Every request was answered, none with an error: the
			// worker's own tool with the plugin's "unsupported" result.
			testenv.WaitFor(t, wait, "the replies to the fake's requests", func() bool {
				_, replies = f.seen()
				return len(replies) >= tt.requests
			})
			for _, r := range replies {
				var res map[string]any
				_ = json.Unmarshal(r.Result, &res)
				own := tt.name == "worker's own tool refused" && string(r.ID) == "5"
				if r.Error != nil || own != (res["success"] == false && res["name"] == "read_file" && res["toolCallId"] == "tc-5") {
					t.Errorf("reply to %s: %s %v, want an unsupported result: %v", r.ID, r.Result, r.Error, own)
				}
			}
		})
	}
}

// TestDedicatedDomain: before a login URL is generated the worker's
// endpoint is switched to the dedicated domain; an enterprise account's
// worker hands out no URL without it, and a switch it refuses fails the
// login.
func TestDedicatedDomain(t *testing.T) {
	const corp = "https://lingma.corp.example"
	w := startSim(t, "--require-endpoint="+corp)
	ctx := context.Background()
	if _, err := connect(t, w, Config{}).LoginURL(ctx); err == nil || !strings.Contains(err.Error(), "dedicated domain") {
		t.Errorf("LoginURL without the domain = %v, want the worker's refusal", err)
	}
	if _, err := connect(t, w, Config{DedicatedDomain: "ftp://nowhere"}).LoginURL(ctx); err == nil ||
		!strings.Contains(err.Error(), "switch endpoint") {
		t.Errorf("LoginURL with a refused switch = %v, want a switch error", err)
	}
	c := connect(t, w, Config{DedicatedDomain: corp})
	u, err := c.LoginURL(ctx)
	if err != nil || !strings.Contains(u, "/login?state=") {
		t.Fatalf("LoginURL = %q, %v", u, err)
	}
	// Already there: read, not switched again.
	if _, err := c.LoginURL(ctx); err != nil {
		t.Errorf("second LoginURL: %v", err)
	}
}

// TestNativeTurnEnds: a turn whose tool calls the worker follows with
// chat/finish ends at that finish (with an hour's settle wait it would
// otherwise outlast collect's bound); one whose worker waits for the results
// instead ends after the configured wait, with its calls.
func TestNativeTurnEnds(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		settle  time.Duration
		minTook time.Duration
	}{
		{name: "chat/finish ends it", give: "Paris", settle: time.Hour},
		{name: "the wait ends it", give: "Paris [[sim:await-results]]", settle: 300 * time.Millisecond,
			minTook: 300 * time.Millisecond},
	}
	w := startSim(t, "--logged-in", "--native-tools")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := connect(t, w, Config{ToolMode: ToolsNative, ToolSettle: tt.settle})
			start := time.Now()
			a := runTurn(t, c, &chat.Turn{Messages: user(tt.give), Agent: true, Tools: []chat.Tool{weatherTool}})
			if took := time.Since(start); took < tt.minTook {
				t.Errorf("the turn took %s, want at least %s", took, tt.minTook)
			}
			if a.err != nil || len(a.calls) != 1 || a.done == nil || a.done.Finish != chat.FinishToolCalls {
				t.Fatalf("answer = %+v %+v %v; want one call and finish tool_calls", a.calls, a.done, a.err)
			}
		})
	}
}

// TestWorkerOwnTools: in agent mode the worker asks for its own tools
// (tool/invoke, synchronous or not) and waits for their results; the driver
// answers as the plugin answers a tool it does not support, and the worker
// goes on to answer.
func TestWorkerOwnTools(t *testing.T) {
	_, c := newSim(t)
	const unsupported = `tool read_file failed: tool "read_file" is not supported by this client ` +
		`(poolgate runs no tool on the worker's machine)`
	tests := []struct {
		give string
		want string
	}{
		{give: "x [[sim:builtin=read_file]]", want: "You said: x\n" + unsupported},
		{give: "x [[sim:builtin-async=read_file]]", want: "You said: x\n" + unsupported},
		{give: "x [[sim:builtin=read_file]] [[sim:builtin-async=read_file]]", want: "You said: x\n" + unsupported + "\n" + unsupported},
	}
	for _, tt := range tests {
		a := runTurn(t, c, &chat.Turn{Messages: user(tt.give), Agent: true})
		if a.err != nil || a.text != tt.want {
			t.Errorf("%q answered %q, %v; want %q", tt.give, a.text, a.err, tt.want)
		}
	}
}

// TestReusePolicy: which sessions a turn hands out for its follow-up, per
// policy. The controlled policy keeps a session while it holds only what
// the gateway sent (plain turns, emulated tools) and ends one in which the
// worker ran its own tools; the chat-only policy keeps only plain turns.
// An ended session is deleted on the worker.
func TestReusePolicy(t *testing.T) {
	w := startSim(t, "--logged-in")
	tools := []chat.Tool{weatherTool}
	tests := []struct {
		policy string
		turn   chat.Turn
		want   bool // the session is handed out
	}{
		{ReuseControlled, chat.Turn{Messages: user("a [[sim:whoami]]")}, true},
		{ReuseControlled, chat.Turn{Messages: user("a [[sim:whoami]]"), Agent: true, Tools: tools}, true},
		{ReuseControlled, chat.Turn{Messages: user("a [[sim:whoami]] [[sim:builtin=read_file]]"), Agent: true}, false},
		{ReuseChatOnly, chat.Turn{Messages: user("a [[sim:whoami]]")}, true},
		{ReuseChatOnly, chat.Turn{Messages: user("a [[sim:whoami]]"), Agent: true}, false},
		{ReuseChatOnly, chat.Turn{Messages: user("a [[sim:whoami]]"), Agent: true, Tools: tools}, false},
	}
	for i, tt := range tests {
		c := connect(t, w, Config{Reuse: tt.policy})
		a := runTurn(t, c, &tt.turn)
		var sid string
		if _, err := fmt.Sscanf(a.text, "session=%s", &sid); err != nil || a.err != nil {
			t.Fatalf("%d: answer %q, %v", i, a.text, a.err)
		}
		if got := a.done.SessionID == sid; got != tt.want {
			t.Errorf("%d: %s policy handed out %q of %s, want it handed out: %v", i, tt.policy, a.done.SessionID, sid, tt.want)
		}
		// A follow-up on the session works only if it was kept.
		b := runTurn(t, c, &chat.Turn{SessionID: sid, Messages: user("b")})
		if (b.err == nil) != tt.want {
			t.Errorf("%d: follow-up on %s: %v, want the session kept: %v", i, sid, b.err, tt.want)
		}
	}
}

// TestContinues: the router asks before it continues a session with only
// the new messages.
func TestContinues(t *testing.T) {
	tools := []chat.Tool{weatherTool}
	tests := []struct {
		cfg  Config
		turn chat.Turn
		want bool
	}{
		{Config{}, chat.Turn{}, true},
		{Config{}, chat.Turn{Agent: true, Tools: tools}, true},
		{Config{ToolMode: ToolsNative}, chat.Turn{Agent: true, Tools: tools}, false},
		{Config{ToolMode: ToolsNative}, chat.Turn{Agent: true}, true},
		{Config{Reuse: ReuseChatOnly}, chat.Turn{}, true},
		{Config{Reuse: ReuseChatOnly, Mode: ModeAgent}, chat.Turn{}, false},
		{Config{Reuse: ReuseChatOnly}, chat.Turn{Agent: true}, false},
	}
	for _, tt := range tests {
		d := New(tt.cfg)
		c := &Client{cfg: d.cfg, native: tt.cfg.ToolMode == ToolsNative}
		if got := c.Continues(&tt.turn); got != tt.want {
			t.Errorf("Continues(%+v) with %+v = %v, want %v", tt.turn, tt.cfg, got, tt.want)
		}
	}
}
