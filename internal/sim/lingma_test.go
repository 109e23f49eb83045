package sim

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/lingmarpc"
)

type authStatus struct {
	Status    int    `json:"status"`
	ID        string `json:"id"`
	Name      string `json:"name"`
	AccountID string `json:"accountId"`
	UserType  string `json:"userType"`
}

func TestFraming(t *testing.T) {
	h := startSim(t, "--logged-in")
	c := dial(t, h)

	// Two frames in one WebSocket message.
	f1, ch1 := c.frame("initialize", map[string]any{"processId": nil, "capabilities": map[string]any{}})
	f2, ch2 := c.frame("auth/status", map[string]any{})
	c.sendRaw(append(append([]byte{}, f1...), f2...))
	awaitMsg(t, ch1, "initialize")
	awaitMsg(t, ch2, "auth/status")

	// One frame split across two messages.
	f3, ch3 := c.frame("config/queryModels", map[string]any{})
	c.sendRaw(f3[:10])
	c.sendRaw(f3[10:])
	awaitMsg(t, ch3, "config/queryModels")

	// Bare JSON is rejected (logged, no answer); the connection stays usable.
	c.sendRaw([]byte(`{"jsonrpc":"2.0","id":99,"method":"initialize"}`))
	poll(t, "bare JSON rejection log", func() bool { return strings.Contains(h.log.String(), "rejecting bare JSON") })
	var init struct {
		ServerInfo struct{ Name string } `json:"serverInfo"`
	}
	c.result("initialize", map[string]any{}, &init)
	if init.ServerInfo.Name != "simworker" {
		t.Errorf("serverInfo.name = %q, want simworker", init.ServerInfo.Name)
	}
}

func TestAuthStatus(t *testing.T) {
	tests := []struct {
		name string
		give []string
		want authStatus
	}{
		{"logged out", nil, authStatus{Status: 1}},
		{"logged in default", []string{"--logged-in"}, authStatus{Status: 2, Name: "demo", AccountID: "demo", UserType: "personal"}},
		{"logged in as", []string{"--accounts=ann:pw,bob:pw2", "--logged-in=bob"}, authStatus{Status: 2, Name: "bob", AccountID: "bob", UserType: "personal"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := startSim(t, tt.give...)
			c := dial(t, h)
			var got authStatus
			c.result("auth/status", map[string]any{}, &got)
			id, _ := os.ReadFile(filepath.Join(h.dir, "cache", "id"))
			if tt.want.Status == 2 {
				tt.want.ID = string(id)
			}
			if got != tt.want {
				t.Errorf("auth/status = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestMethods(t *testing.T) {
	h := startSim(t, "--logged-in")
	c := dial(t, h)
	var models map[string][]modelInfo
	c.result("config/queryModels", map[string]any{}, &models)
	if got := models["chat"]; len(got) != 2 || got[0].Key != "dashscope_qwen3_coder" || got[1].DisplayName != "Kimi" {
		t.Errorf("chat models = %+v, want qwen3 coder and kimi", got)
	}
	if len(models["assistant"]) != 2 {
		t.Errorf("assistant models = %+v, want 2", models["assistant"])
	}
	m := c.call("no/such", map[string]any{})
	if m.Error == nil || m.Error.Code != -32601 || m.Error.Message != "unknown method: no/such" {
		t.Errorf("unknown method error = %v, want -32601 unknown method", m.Error)
	}
	// A notification it has no handler for is logged, not answered.
	b, _ := lingmarpc.Encode(&lingmarpc.Message{Method: "initialized", Params: json.RawMessage(`{}`)})
	c.sendRaw(b)
	poll(t, "the unknown notification logged", func() bool { return strings.Contains(h.log.String(), "unknown method: initialized") })
	c.quiet(100 * time.Millisecond)
	var gen struct {
		LoginURL string `json:"loginUrl"`
		Nonce    string `json:"nonce"`
		Success  bool   `json:"success"`
	}
	c.result("login/generateUrl", map[string]any{"loginDedicatedType": ""}, &gen)
	wantPrefix := h.baseURL() + "/login?state=" + gen.Nonce + "&port="
	if !gen.Success || gen.Nonce == "" || !strings.HasPrefix(gen.LoginURL, wantPrefix) {
		t.Errorf("generateUrl = %+v, want url prefix %s", gen, wantPrefix)
	}
}

// A worker without credentials refuses the turn in the reply's own shape
// ({success, errorCode, errorMessage}), with its log line's words.
func TestAskNotLoggedIn(t *testing.T) {
	h := startSim(t)
	c := dial(t, h)
	var got map[string]any
	c.result("chat/ask", askParamsFor("r1", "", "hi", false), &got)
	if got["success"] != false || got["errorMessage"] != "No cached user info, please login." || got["errorMsg"] != nil {
		t.Fatalf("chat/ask logged out = %v, want success false with errorMessage", got)
	}
	c.quiet(100 * time.Millisecond)
}

func TestChatStreaming(t *testing.T) {
	h := startSim(t, "--logged-in")
	c := dial(t, h)
	got := c.turn("r1", "", "hello  big world", false)
	want := []string{"You ", "said: ", "hello  ", "big ", "world"}
	if strings.Join(got.deltas, "|") != strings.Join(want, "|") {
		t.Errorf("deltas = %q, want %q", got.deltas, want)
	}
	if got.finish.FullAnswer != got.text() || got.finish.StatusCode != 200 || got.finish.Reason != "success" {
		t.Errorf("finish = %+v, want success with the deltas' text", got.finish)
	}
	if !strings.HasPrefix(got.finish.SessionID, "sess-") {
		t.Errorf("sessionId = %q, want sess-...", got.finish.SessionID)
	}
}

// TestServerWaitsForReply: the worker's messages of a turn are requests,
// in the order a real worker sends them, each sent only once the client
// answered the one before.
func TestServerWaitsForReply(t *testing.T) {
	h := startSim(t, "--logged-in")
	c := dial(t, h)
	c.ask("r1", "", "one two", false)
	want := []string{"chat/process_step_callback", "session/title/update", "chat/answer", "chat/answer",
		"chat/answer", "chat/answer", "chat/process_step_callback", "chat/finish"}
	for i, method := range want {
		m := c.next()
		if m.Method != method || len(m.ID) == 0 {
			t.Fatalf("message %d = %s id %s, want a %s request", i, m.Method, m.ID, method)
		}
		if i == 0 {
			c.quiet(200 * time.Millisecond)
		}
		c.reply(m)
	}
	r := c.turn("r2", "", "[[sim:error]]", false)
	if strings.Join(r.steps, " ") != "step_start:done step_end:error" || len(r.titles) != 1 {
		t.Errorf("a failed turn's steps %q and titles %q, want start and end (error) and one title", r.steps, r.titles)
	}
}

// TestBuiltinTools: in agent mode the worker asks the client to run its
// own tools, synchronously (the result is the reply) or not (the reply is an
// acknowledgement, the result a tool/invokeResult request), and waits for the
// result. A JSON-RPC error is no tool result: the plugin never answers so,
// and the turn fails. A chat-mode turn runs no tools.
func TestBuiltinTools(t *testing.T) {
	h := startSim(t, "--logged-in", "--reply-timeout=300ms")
	c := dial(t, h)
	unsupported := func(m *lingmarpc.Message, async bool) {
		var inv toolInvoke
		if err := json.Unmarshal(m.Params, &inv); err != nil || inv.Name != "read_file" || inv.ToolCallID == "" ||
			inv.RequestID == "" || inv.Async != async || inv.Parameters == nil {
			t.Fatalf("tool/invoke %s: %v, want read_file with a call id, async %v", m.Params, err, async)
		}
		res := map[string]any{"toolCallId": inv.ToolCallID, "name": inv.Name, "success": false,
			"errorMessage": "not here", "result": nil, "startTime": 1, "timeConsuming": 0}
		if !async {
			c.replyWith(m, res)
			return
		}
		c.replyWith(m, map[string]any{})
		var ok map[string]any
		c.result("tool/invokeResult", res, &ok)
		if ok["errorCode"] != nil || len(ok) != 2 {
			t.Errorf("tool/invokeResult answered %v, want null errorCode and errorMessage", ok)
		}
	}
	tests := []struct {
		name   string
		text   string
		answer func(m *lingmarpc.Message)
		want   string
	}{
		{"sync", "x [[sim:builtin=read_file]]", func(m *lingmarpc.Message) { unsupported(m, false) },
			"You said: x\ntool read_file failed: not here"},
		{"async", "x [[sim:builtin-async=read_file]]", func(m *lingmarpc.Message) { unsupported(m, true) },
			"You said: x\ntool read_file failed: not here"},
		{"json-rpc error", "x [[sim:builtin=read_file]]", func(m *lingmarpc.Message) {
			b, _ := lingmarpc.Encode(&lingmarpc.Message{ID: m.ID, Error: &lingmarpc.Error{Code: -32601, Message: "no"}})
			c.sendRaw(b)
		}, "error"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := fmt.Sprintf("b%d", i)
			p := askParamsFor(id, "", tt.text, false)
			p["mode"], p["sessionType"] = "agent", "assistant"
			c.result("chat/ask", p, new(map[string]any))
			r := c.collectWith(map[string]func(*lingmarpc.Message){"tool/invoke": tt.answer}, id)[id]
			got := r.finish.FullAnswer
			if r.finish.StatusCode != 200 {
				got = r.finish.Reason
			}
			if got != tt.want {
				t.Errorf("answer %q (finish %+v), want %q", got, r.finish, tt.want)
			}
		})
	}
	if st := h.stats(t); st.BuiltinCalls != 3 {
		t.Errorf("builtin calls %d, want 3", st.BuiltinCalls)
	}
	r := c.turn("chat", "", "x [[sim:builtin=read_file]]", false)
	if r.finish.FullAnswer != "You said: x" || h.stats(t).BuiltinCalls != 3 {
		t.Errorf("a chat-mode turn answered %q, want no tool called", r.finish.FullAnswer)
	}
}

// An asynchronous tool call whose result never comes leaves the turn
// unfinished, as the reply timeout runs out.
func TestBuiltinResultMissing(t *testing.T) {
	h := startSim(t, "--logged-in", "--reply-timeout=100ms", "--builtin-tool=read_file", "--builtin-async")
	c := dial(t, h)
	p := askParamsFor("r1", "", "x", false)
	p["mode"], p["sessionType"] = "agent", "assistant"
	c.result("chat/ask", p, new(map[string]any))
	for {
		m := c.next()
		if m.Method == "tool/invoke" {
			c.replyWith(m, map[string]any{})
			break
		}
		c.reply(m)
	}
	poll(t, "no response log", func() bool { return strings.Contains(h.log.String(), "no response from client") })
	c.quiet(100 * time.Millisecond)
}

func TestNoReplyAbandonsTurn(t *testing.T) {
	h := startSim(t, "--logged-in", "--reply-timeout=100ms")
	c := dial(t, h)
	c.ask("r1", "", "one two", false)
	c.next() // never answered
	poll(t, "no response log", func() bool { return strings.Contains(h.log.String(), "no response from client") })
	c.quiet(100 * time.Millisecond)
}

func TestSessionReuse(t *testing.T) {
	h := startSim(t, "--logged-in")
	c := dial(t, h)
	q1 := "[[sim:whoami]] first"
	r1 := c.turn("r1", "", q1, false)
	sid := r1.finish.SessionID
	if want := whoamiText(sid, 1, false, 1, len(q1)); r1.text() != want {
		t.Errorf("turn 1 = %q, want %q", r1.text(), want)
	}
	q2 := "<<<user>>>\nsecond [[sim:whoami]]"
	r2 := c.turn("r2", sid, q2, true)
	if want := whoamiText(sid, 2, true, 1, len(q2)); r2.text() != want || r2.finish.SessionID != sid {
		t.Errorf("turn 2 = %q in %s, want %q", r2.text(), r2.finish.SessionID, want)
	}
	r3 := c.turn("r3", "sess-unknown", "x", true)
	if r3.finish.StatusCode != 500 || r3.finish.ErrorMessage != "session not found" || len(r3.deltas) != 0 {
		t.Errorf("unknown session finish = %+v, want 500 session not found", r3.finish)
	}
	var ok struct{ Success bool }
	c.result("chat/deleteSessionById", map[string]any{"sessionId": sid}, &ok)
	r4 := c.turn("r4", sid, "again", true)
	if r4.finish.StatusCode != 500 {
		t.Errorf("deleted session finish = %+v, want 500", r4.finish)
	}
	if st := h.stats(t); st.Sessions != 1 || st.Asks != 4 || st.LoginPageHits != 0 {
		t.Errorf("stats = %+v, want 1 session, 4 asks, 0 login hits", st)
	}
}

const weatherTools = `{"tool_choice":"auto","tools":[{"name":"get_weather","description":"Weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}},{"name":"add","parameters":{"type":"object","properties":{"a":{"type":"number"},"loud":{"type":"boolean"},"unit":{"type":"string","enum":["c","f"]}}}}]}`

func TestToolAnswers(t *testing.T) {
	named := strings.Replace(weatherTools, `"auto"`, `"add"`, 1)
	tests := []struct {
		name string
		give string
		want string
	}{
		{"json form", "<<<tools>>>\n" + weatherTools + "\n<<<contract>>>\nuse tools\n<<<user>>>\nParis [[sim:call=get_weather]]",
			"```json\n{\"tool_calls\":[{\"arguments\":{\"city\":\"Paris\"},\"name\":\"get_weather\"}]}\n```"},
		{"several tools, none asked for", "<<<tools>>>\n" + weatherTools + "\n<<<contract>>>\nuse tools\n<<<user>>>\nParis",
			"You said: Paris"},
		{"directed calls with arguments", "<<<tools>>>\n" + weatherTools + "\n<<<user>>>\nboth [[sim:call=add {\"a\":[2]}]] [[sim:call=get_weather {\"city\":\"Rome\"}]] [[sim:call=nope]]",
			"```json\n{\"tool_calls\":[{\"arguments\":{\"a\":[2]},\"name\":\"add\"},{\"arguments\":{\"city\":\"Rome\"},\"name\":\"get_weather\"}]}\n```"},
		{"system after the user turn", "<<<tools>>>\n" + weatherTools + "\n<<<user>>>\n<system-reminder>\nbe careful\n</system-reminder>\nRome [[sim:call=get_weather]]\n<<<system>>>\nenv: linux",
			"```json\n{\"tool_calls\":[{\"arguments\":{\"city\":\"Rome\"},\"name\":\"get_weather\"}]}\n```"},
		{"result before a system section", "<<<user>>>\nParis\n<<<tool_call id=c1 name=get_weather>>>\n{}\n<<<tool_result id=c1>>>\nsunny\n<<<system>>>\nenv",
			"Tool get_weather returned: sunny"},
		{"reminders are not echoed", "<<<user>>>\n<system-reminder>\nx\n</system-reminder>\nhello", "You said: hello"},
		{"tool_code positional", "<<<tools>>>\n" + weatherTools + "\n<<<user>>>\nParis [[sim:tool_code]] [[sim:call=get_weather]]",
			"```tool_code\nget_weather(\"Paris\")\n```"},
		{"tool_code keywords", "<<<tools>>>\n" + named + "\n<<<user>>>\nsum [[sim:tool_code]]",
			"```tool_code\nadd(a=1, loud=True, unit=\"c\")\n```"},
		{"after result", "<<<tools>>>\n" + weatherTools + "\n<<<user>>>\nParis\n<<<tool_call id=call_1 name=get_weather>>>\n{}\n<<<tool_result id=call_1>>>\n18C and sunny",
			"Tool get_weather returned: 18C and sunny"},
		{"no tools", "<<<system>>>\nbe nice\n<<<user>>>\nhi there [[sim:chunks=2]]", "You said: hi there"},
		{"words", "hi [[sim:words=5]]", "You said: hi lorem ipsum"},
		{"escaped marker", "<<<user>>>\n <<<user>>> is literal", "You said: <<<user>>> is literal"},
		{"json by schema", "<<<format>>>\nAnswer with JSON.\nThe value must follow this JSON Schema:\n" +
			`{"type":"OBJECT","properties":{"why":{"type":"STRING"},"score":{"type":"INTEGER"},"tags":{"type":"array","items":{"enum":["a","b"]}}}}` +
			"\n<<<user>>>\n<session_context>\nenv\n</session_context>\nrate it", `{"score":1,"tags":["a"],"why":"rate it"}`},
		{"json without a schema", "<<<format>>>\nAnswer with JSON.\n<<<user>>>\nhi", `{}`},
		{"json wins over whoami", "<<<format>>>\nAnswer with JSON.\n<<<user>>>\nhi [[sim:whoami]] [[sim:ask]]", `{}`},
		{"a tool call wins over the format", "<<<tools>>>\n" + weatherTools + "\n<<<format>>>\nAnswer with JSON.\n<<<user>>>\nParis [[sim:call=get_weather]]",
			"```json\n{\"tool_calls\":[{\"arguments\":{\"city\":\"Paris\"},\"name\":\"get_weather\"}]}\n```"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, startSim(t, "--logged-in"))
			got := c.turn("r-"+tt.name, "", tt.give, false)
			if got.finish.FullAnswer != tt.want || got.text() != tt.want {
				t.Errorf("answer = %q (deltas %q), want %q", got.finish.FullAnswer, got.text(), tt.want)
			}
		})
	}
}

func TestToolsFromEarlierTurn(t *testing.T) {
	h := startSim(t, "--logged-in")
	c := dial(t, h)
	r1 := c.turn("r1", "", "<<<tools>>>\n"+weatherTools+"\n<<<user>>>\nhello", false)
	r2 := c.turn("r2", r1.finish.SessionID, "<<<user>>>\nBerlin [[sim:call=get_weather]]", true)
	want := "```json\n{\"tool_calls\":[{\"arguments\":{\"city\":\"Berlin\"},\"name\":\"get_weather\"}]}\n```"
	if r2.finish.FullAnswer != want {
		t.Errorf("continuation answer = %q, want %q", r2.finish.FullAnswer, want)
	}
}

func TestFaults(t *testing.T) {
	type want struct {
		status, deltas, retryAfter, thinks int
		reason, full, message              string
	}
	tests := []struct {
		name string
		args []string
		give string
		want want
	}{
		{"error", nil, "a b c [[sim:error]]", want{status: 500, reason: "error", message: "simulated error"}},
		{"error after", nil, "a b c [[sim:error-after=2]]", want{status: 500, reason: "error", deltas: 2, full: "You said: ", message: "simulated error"}},
		{"ratelimit", nil, "a [[sim:ratelimit]]", want{status: 500, reason: "error", retryAfter: 1, message: "rate limited: too many requests"}},
		{"ratelimit 2s", nil, "a [[sim:ratelimit=2s]]", want{status: 500, reason: "error", retryAfter: 2, message: "rate limited: too many requests"}},
		{"timeout", nil, "a [[sim:timeout]]", want{status: 408, reason: "error", message: "upstream request timed out"}},
		{"chunks", nil, "a b c d e [[sim:chunks=3]]", want{status: 200, reason: "success", deltas: 3, full: "You said: a b c d e"}},
		{"chunks pad", nil, "a [[sim:chunks=5]]", want{status: 200, reason: "success", deltas: 5, full: "You said: a lorem ipsum"}},
		{"chunks flag", []string{"--chunks=2"}, "a b c", want{status: 200, reason: "success", deltas: 2, full: "You said: a b c"}},
		{"think and delays", nil, "a [[sim:think]] [[sim:delay=20ms]] [[sim:chunk-delay=5ms]]", want{status: 200, reason: "success", deltas: 3, thinks: 1, full: "You said: a"}},
		{"delay flag", []string{"--delay=10ms", "--chunk-delay=1ms"}, "a", want{status: 200, reason: "success", deltas: 3, full: "You said: a"}},
		{"fail rate", []string{"--fail-rate=1"}, "a", want{status: 500, reason: "error", message: "simulated error"}},
		{"ratelimit every", []string{"--ratelimit-every=1"}, "a", want{status: 500, reason: "error", retryAfter: 1, message: "rate limited: too many requests"}},
		{"directive in old turn ignored", nil, "<<<user>>>\n[[sim:error]]\n<<<assistant>>>\nno\n<<<user>>>\nok", want{status: 200, reason: "success", deltas: 3, full: "You said: ok"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := startSim(t, append([]string{"--logged-in"}, tt.args...)...)
			c := dial(t, h)
			r := c.turn("r1", "", tt.give, false)
			got := want{status: r.finish.StatusCode, deltas: len(r.deltas), retryAfter: r.finish.RetryAfter,
				thinks: r.thinks, reason: r.finish.Reason, full: r.finish.FullAnswer, message: r.finish.ErrorMessage}
			if got != tt.want {
				t.Errorf("turn = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestLogoutDirective(t *testing.T) {
	h := startSim(t, "--logged-in")
	c := dial(t, h)
	r := c.turn("r1", "", "bye [[sim:logout]]", false)
	if r.finish.StatusCode != 200 || r.finish.FullAnswer != "You said: bye" {
		t.Errorf("logout turn finish = %+v, want a normal answer", r.finish)
	}
	var st authStatus
	c.result("auth/status", map[string]any{}, &st)
	if st.Status != 1 {
		t.Errorf("auth/status after logout = %+v, want status 1", st)
	}
	for _, f := range []string{"id", "user"} {
		if _, err := os.Stat(filepath.Join(h.dir, "cache", f)); !os.IsNotExist(err) {
			t.Errorf("cache/%s after logout: stat err %v, want not exist", f, err)
		}
	}
}

func TestHangAndStop(t *testing.T) {
	h := startSim(t, "--logged-in")
	c := dial(t, h)
	c.ask("r1", "", "wait [[sim:hang]]", false)
	c.opened()
	c.quiet(100 * time.Millisecond)
	var ok struct{ Success bool }
	c.result("chat/stop", map[string]any{"requestId": "r1"}, &ok)
	r := c.collect("r1")["r1"]
	if !ok.Success || r.finish.StatusCode != 200 || r.finish.Reason != "cancelled" {
		t.Errorf("stop: success %v finish %+v, want 200 cancelled", ok.Success, r.finish)
	}
}

func TestStopMidStream(t *testing.T) {
	h := startSim(t, "--logged-in")
	c := dial(t, h)
	c.ask("r1", "", "a b c d", false)
	first := c.nextAnswer()
	var ok struct{ Success bool }
	c.result("chat/stop", map[string]any{"requestId": "r1"}, &ok)
	c.reply(first)
	r := c.collect("r1")["r1"]
	if r.finish.StatusCode != 200 || r.finish.Reason != "cancelled" || r.finish.FullAnswer != "You " {
		t.Errorf("finish = %+v, want cancelled with the one delta sent", r.finish)
	}
}

func TestCrashHook(t *testing.T) {
	h := startSim(t, "--logged-in")
	c := dial(t, h)
	c.ask("r1", "", "a b c [[sim:crash]]", false)
	c.reply(c.nextAnswer())
	select {
	case code := <-h.exits:
		if code != 3 {
			t.Errorf("exit code = %d, want 3", code)
		}
	case <-time.After(wait):
		t.Fatal("crash did not call the exit hook")
	}
	if !c.isClosed() {
		t.Error("connection still open after crash")
	}
}

// Without --directives a prompt's directives do nothing: a caller cannot
// crash the worker, log it out, read its environment or size its answer.
func TestDirectivesNeedTheFlag(t *testing.T) {
	h := startSim(t, "--logged-in", "--directives=false")
	c := dial(t, h)
	c.ask("r1", "", "a [[sim:crash]] [[sim:env]] [[sim:logout]] [[sim:words=50]]", false)
	r := c.collect("r1")["r1"]
	if r.finish.StatusCode != 200 || r.text() != "You said: a" {
		t.Errorf("answer %q, finish %+v; want the plain echo", r.text(), r.finish)
	}
	select {
	case code := <-h.exits:
		t.Errorf("the worker exited (%d)", code)
	default:
	}
	var st authStatus
	c.result("auth/status", map[string]any{}, &st)
	if st.Status != 2 {
		t.Errorf("auth status %d after [[sim:logout]], want still logged in (2)", st.Status)
	}
}

func TestConcurrentTurns(t *testing.T) {
	h := startSim(t, "--logged-in")
	var wg sync.WaitGroup
	for i := range 3 {
		c := dial(t, h)
		wg.Go(func() {
			ids := []string{fmt.Sprint(i, "a"), fmt.Sprint(i, "b"), fmt.Sprint(i, "c")}
			for _, id := range ids { // request ids are unique per process, as a gateway makes them
				c.ask(id, "", id+" x y [[sim:chunk-delay=1ms]]", false)
			}
			for id, r := range c.collect(ids...) {
				if r.finish.StatusCode != 200 || r.text() != "You said: "+id+" x y" {
					t.Errorf("conn %d turn %s = %q %+v", i, id, r.text(), r.finish)
				}
			}
		})
	}
	wg.Wait()
	if st := h.stats(t); st.Sessions != 9 {
		t.Errorf("sessions = %d, want 9", st.Sessions)
	}
}

func TestDuplicateRequestID(t *testing.T) {
	h := startSim(t, "--logged-in")
	c := dial(t, h)
	c.ask("r1", "", "[[sim:hang]]", false)
	m := c.call("chat/ask", askParamsFor("r1", "", "x", false))
	if m.Error == nil || m.Error.Code != -32602 {
		t.Errorf("duplicate requestId error = %v, want -32602", m.Error)
	}
	c.result("chat/stop", map[string]any{"requestId": "r1"}, &json.RawMessage{})
	c.collect("r1")
}

func TestLargePrompt(t *testing.T) {
	h := startSim(t, "--logged-in")
	c := dial(t, h)
	q := "[[sim:whoami]] " + strings.Repeat("word ", 60<<10) // 300 KiB, far past the default WebSocket read limit
	r := c.turn("r1", "", q, false)
	if want := whoamiText(r.finish.SessionID, 1, false, 1, len(q)); r.text() != want {
		t.Errorf("answer = %q, want %q", r.text(), want)
	}
}

// TestAskModes: the simulator takes the ask modes and session types the
// evidence shows and refuses any other in the reply's failure shape.
func TestAskModes(t *testing.T) {
	h := startSim(t, "--logged-in")
	c := dial(t, h)
	tests := []struct {
		mode, sessionType string
		wantOK            bool
	}{
		{"normal", "chat", true},
		{"chat", "chat", true},
		{"edit", "chat", true},
		{"agent", "assistant", true},
		{"agent", "developer", true},
		{"", "inline", true},
		{"free", "chat", false},
		{"normal", "assistant-2", false},
	}
	for i, tt := range tests {
		p := askParamsFor(fmt.Sprintf("m%d", i), "", "hi", false)
		p["mode"], p["sessionType"] = tt.mode, tt.sessionType
		var got map[string]any
		c.result("chat/ask", p, &got)
		if got["success"] != tt.wantOK {
			t.Errorf("mode %q session type %q: %v, want success %v", tt.mode, tt.sessionType, got, tt.wantOK)
		}
		if tt.wantOK {
			c.collect(fmt.Sprintf("m%d", i))
		} else if msg, _ := got["errorMessage"].(string); !strings.Contains(msg, "unsupported") {
			t.Errorf("refusal %v, want an errorMessage saying what is unsupported", got)
		}
	}
}
