package sim

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/testenv"

	"github.com/poolgate/poolgate/internal/lingmarpc"
)

// wait bounds every wait in these tests.
const wait = 5 * time.Second

// poll waits (bounded) until cond holds.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// harness is one in-process simworker.
type harness struct {
	dir          string
	socket, http int
	exits        chan int
	log          *testenv.Buffer
}

// startSim runs a simworker with the standard Lingma command line plus args,
// in a work dir dir ("" for a fresh one), until the test ends.
func startSimIn(t *testing.T, dir string, args ...string) *harness {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	h := &harness{dir: dir, socket: testenv.FreePort(t), http: testenv.FreePort(t), exits: make(chan int, 4), log: &testenv.Buffer{}}
	all := append([]string{"start", "--directives", "--transportType=websocket", "--workDir=" + dir,
		"--socketPort=" + strconv.Itoa(h.socket), "--httpPort=" + strconv.Itoa(h.http)}, args...)
	cfg, err := ParseArgs(all, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatalf("ParseArgs(%q): %v", all, err)
	}
	cfg.Exit = func(code int) { h.exits <- code }
	s, err := New(cfg, slog.New(slog.NewTextHandler(h.log, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(wait):
			t.Errorf("simworker did not stop")
		}
	})
	poll(t, "simworker listening", func() bool { return strings.Contains(h.log.String(), "simworker listening") })
	return h
}

func startSim(t *testing.T, args ...string) *harness {
	t.Helper()
	return startSimIn(t, "", args...)
}

func (h *harness) baseURL() string { return "http://127.0.0.1:" + strconv.Itoa(h.http) }

func (h *harness) stats(t *testing.T) Stats {
	t.Helper()
	var st Stats
	getJSON(t, h.baseURL()+"/sim/stats", &st)
	return st
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: decode: %v", url, err)
	}
}

// client is a Lingma protocol client over a real WebSocket
// (lingmarpc.Conn, as poolgate doctor's).
type client struct {
	t    *testing.T
	conn *lingmarpc.Conn
}

func dial(t *testing.T, h *harness) *client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	conn, err := lingmarpc.Dial(ctx, h.socket, lingmarpc.ConnConfig{
		Bad: func(_ []byte, err error) { t.Errorf("client decode: %v", err) }})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(conn.Close)
	return &client{t: t, conn: conn}
}

// sendRaw writes bytes as one WebSocket text message.
func (c *client) sendRaw(b []byte) {
	c.t.Helper()
	if err := c.conn.Raw(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// frame encodes a request and registers for its response.
func (c *client) frame(method string, params any) ([]byte, <-chan *lingmarpc.Message) {
	c.t.Helper()
	b, ch, err := c.conn.Frame(method, params)
	if err != nil {
		c.t.Fatalf("frame %s: %v", method, err)
	}
	return b, ch
}

func awaitMsg(t *testing.T, ch <-chan *lingmarpc.Message, what string) *lingmarpc.Message {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(wait):
		t.Fatalf("timed out waiting for %s", what)
		return nil
	}
}

// call sends a request and returns the whole response message.
func (c *client) call(method string, params any) *lingmarpc.Message {
	c.t.Helper()
	b, ch := c.frame(method, params)
	c.sendRaw(b)
	return awaitMsg(c.t, ch, "response to "+method)
}

// result calls method and decodes a successful result into v.
func (c *client) result(method string, params, v any) {
	c.t.Helper()
	m := c.call(method, params)
	if m.Error != nil {
		c.t.Fatalf("%s: %v", method, m.Error)
	}
	if err := json.Unmarshal(m.Result, v); err != nil {
		c.t.Fatalf("%s: decode %s: %v", method, m.Result, err)
	}
}

// next returns the next server-to-client message.
func (c *client) next() *lingmarpc.Message {
	c.t.Helper()
	return awaitMsg(c.t, c.conn.In, "a server request")
}

// nextAnswer answers the step callbacks and titles that open a turn and
// returns its first chat/answer, unanswered.
func (c *client) nextAnswer() *lingmarpc.Message {
	c.t.Helper()
	for {
		m := c.next()
		switch m.Method {
		case "chat/process_step_callback", "session/title/update":
			c.reply(m)
		case "chat/answer":
			return m
		default:
			c.t.Fatalf("got %s before the first chat/answer", m.Method)
		}
	}
}

// opened answers the step callback and the title that open a new
// session's turn.
func (c *client) opened() {
	c.t.Helper()
	for _, want := range []string{"chat/process_step_callback", "session/title/update"} {
		if m := c.next(); m.Method != want {
			c.t.Fatalf("got %s, want %s", m.Method, want)
		} else {
			c.reply(m)
		}
	}
}

// quiet asserts that no server message arrives within d.
func (c *client) quiet(d time.Duration) {
	c.t.Helper()
	select {
	case m := <-c.conn.In:
		c.t.Fatalf("got %s %s while the server should wait", m.Method, m.Params)
	case <-time.After(d):
	}
}

func (c *client) reply(m *lingmarpc.Message) { c.replyWith(m, map[string]any{}) }

// replyWith answers a server request with result.
func (c *client) replyWith(m *lingmarpc.Message, result any) {
	c.t.Helper()
	raw, err := json.Marshal(result)
	if err != nil {
		c.t.Fatalf("marshal: %v", err)
	}
	b, err := lingmarpc.Encode(&lingmarpc.Message{ID: m.ID, Result: raw})
	if err != nil {
		c.t.Fatalf("encode: %v", err)
	}
	c.sendRaw(b)
}

// turnResult is what a client saw of one turn.
type turnResult struct {
	deltas []string
	thinks int
	// steps are the step callbacks ("step_start:done"), titles the session
	// titles the worker sent, in order.
	steps, titles []string
	finish        finishParams
}

func (r turnResult) text() string { return strings.Join(r.deltas, "") }

func askParamsFor(reqID, sid, text string, reply bool) map[string]any {
	return map[string]any{
		"requestId": reqID, "sessionId": sid, "questionText": text, "chatContext": map[string]any{"text": text},
		"chatTask": "FREE_INPUT", "sessionType": "chat", "mode": "chat", "stream": true, "source": 1,
		"isReply": reply, "extra": map[string]any{"modelConfig": map[string]any{"key": "dashscope_qwen3_coder"}},
	}
}

// ask starts a turn and checks the immediate {success:true}.
func (c *client) ask(reqID, sid, text string, reply bool) {
	c.t.Helper()
	var res struct {
		Success bool `json:"success"`
	}
	c.result("chat/ask", askParamsFor(reqID, sid, text, reply), &res)
	if !res.Success {
		c.t.Fatalf("chat/ask %s: success false", reqID)
	}
}

// collect answers every server request until the finish of each of reqIDs.
func (c *client) collect(reqIDs ...string) map[string]*turnResult {
	c.t.Helper()
	return c.collectWith(nil, reqIDs...)
}

// collectWith is collect with the answers to some methods given by answer.
func (c *client) collectWith(answer map[string]func(*lingmarpc.Message), reqIDs ...string) map[string]*turnResult {
	c.t.Helper()
	out := map[string]*turnResult{}
	for _, id := range reqIDs {
		out[id] = &turnResult{}
	}
	for left := len(reqIDs); left > 0; {
		m := c.next()
		var p finishParams
		if err := json.Unmarshal(m.Params, &p); err != nil {
			c.t.Fatalf("%s params: %v", m.Method, err)
		}
		if m.Method == "session/title/update" {
			c.titled(m, out)
			continue
		}
		if f := answer[m.Method]; f != nil {
			f(m)
			continue
		}
		r := out[p.RequestID]
		if r == nil {
			c.t.Fatalf("%s for unexpected request %q", m.Method, p.RequestID)
		}
		switch m.Method {
		case "chat/answer":
			var d deltaParams
			_ = json.Unmarshal(m.Params, &d)
			r.deltas = append(r.deltas, d.Text)
		case "chat/think":
			r.thinks++
		case "chat/process_step_callback":
			var st struct{ Step, Status string }
			_ = json.Unmarshal(m.Params, &st)
			r.steps = append(r.steps, st.Step+":"+st.Status)
		case "chat/finish":
			r.finish = p
			left--
		default:
			c.t.Fatalf("unexpected server request %s", m.Method)
		}
		c.reply(m)
	}
	return out
}

// titled notes a session title on the turns of its session (one turn
// without a session yet takes it) and answers it.
func (c *client) titled(m *lingmarpc.Message, out map[string]*turnResult) {
	c.t.Helper()
	var p struct{ SessionID, SessionTitle string }
	if err := json.Unmarshal(m.Params, &p); err != nil || p.SessionID == "" {
		c.t.Fatalf("session/title/update params %s: %v", m.Params, err)
	}
	for _, r := range out {
		r.titles = append(r.titles, p.SessionTitle)
	}
	c.reply(m)
}

// turn asks and collects one turn.
func (c *client) turn(reqID, sid, text string, reply bool) *turnResult {
	c.t.Helper()
	c.ask(reqID, sid, text, reply)
	return c.collect(reqID)[reqID]
}

// isClosed reports whether the server dropped the connection within wait.
func (c *client) isClosed() bool {
	select {
	case <-c.conn.Done():
		return true
	case <-time.After(wait):
		return false
	}
}

var errNoMatch = errors.New("no match")

// sseEvents reads an SSE body into its data payloads.
func sseEvents(body io.Reader) ([]string, error) {
	b, err := io.ReadAll(body)
	var out []string
	for _, block := range strings.Split(string(b), "\n\n") {
		if data, ok := strings.CutPrefix(strings.TrimSpace(block), "data: "); ok {
			out = append(out, data)
		}
	}
	if len(out) == 0 && err == nil {
		return nil, errNoMatch
	}
	return out, err
}
