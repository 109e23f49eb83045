package lingma

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/worker"
	"github.com/poolgate/poolgate/pool/worker/workertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait bounds every wait in these tests.
const wait = 10 * time.Second

// startSim runs sim.Main with the driver's own command line (minus the
// binary) plus extra args, until the test ends.
func startSim(t *testing.T, extra ...string) *workertest.Worker {
	t.Helper()
	argv := func(ep worker.Endpoint) []string {
		return New(Config{Command: []string{"sim"}, ExtraArgs: extra}).Command(ep)[1:]
	}
	return workertest.Start(t, "acct-1", argv, nil, &testenv.Buffer{}, wait)
}

// connect connects a driver of cfg to w as the supervisor does.
func connect(t *testing.T, w *workertest.Worker, cfg Config) *Client {
	t.Helper()
	return workertest.Connect[*Client](t, New(cfg), w.Endpoint, wait)
}

func newSim(t *testing.T, extra ...string) (*workertest.Worker, *Client) {
	t.Helper()
	w := startSim(t, append([]string{"--logged-in"}, extra...)...)
	return w, connect(t, w, Config{})
}

// answer is a whole collected stream.
type answer struct {
	text  string
	calls []chat.ToolCall
	done  *chat.Event
	err   error
}

// collect reads a to its end, within wait (see chattest.Read).
func collect(t *testing.T, a chat.Answer) answer {
	t.Helper()
	w := chattest.Read(t, a, wait)
	return answer{text: w.Text, calls: w.Calls, done: w.Done, err: w.Err}
}

func runTurn(t *testing.T, c *Client, turn *chat.Turn) answer {
	t.Helper()
	a, err := c.Start(context.Background(), turn)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return collect(t, a)
}

// openTurns is the number of turns the client still routes messages to.
func openTurns(c *Client) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.turns)
}

func user(text string) []chat.Message { return []chat.Message{{Role: chat.RoleUser, Content: text}} }

func TestCommand(t *testing.T) {
	ep := worker.Endpoint{WorkDir: "/w/a", Port: 7001, AuxPort: 7002}
	tests := []struct {
		give Config
		want []string
	}{
		{give: Config{}, want: []string{"Lingma", "start", "--transportType=websocket", "--workDir=/w/a",
			"--socketPort=7001", "--httpPort=7002"}},
		{give: Config{Command: []string{"/bin/poolgate", "simworker"}, ExtraArgs: []string{"--chunk-delay=1ms"}},
			want: []string{"/bin/poolgate", "simworker", "start", "--transportType=websocket", "--workDir=/w/a",
				"--socketPort=7001", "--httpPort=7002", "--chunk-delay=1ms"}},
	}
	for _, tt := range tests {
		if got := New(tt.give).Command(ep); !slices.Equal(got, tt.want) {
			t.Errorf("Command() = %q, want %q", got, tt.want)
		}
	}
}

func TestStatus(t *testing.T) {
	_, in := newSim(t)
	st, err := in.Status(context.Background())
	if err != nil || !st.LoggedIn || st.Account != "demo" {
		t.Errorf("Status() = %+v, %v; want logged in as demo", st, err)
	}

	w := startSim(t)
	out := connect(t, w, Config{})
	st, err = out.Status(context.Background())
	if err != nil || st.LoggedIn {
		t.Errorf("Status() = %+v, %v; want logged out", st, err)
	}
	if _, err := out.Start(context.Background(), &chat.Turn{Messages: user("hi")}); !errors.Is(err, chat.ErrNotLoggedIn) {
		t.Errorf("Start() logged out = %v, want ErrNotLoggedIn", err)
	}
	u, err := out.LoginURL(context.Background())
	if err != nil || !strings.Contains(u, "port="+strconv.Itoa(w.Endpoint.AuxPort)) {
		t.Errorf("LoginURL() = %q, %v; want a URL with the callback port", u, err)
	}
}

func TestModels(t *testing.T) {
	_, c := newSim(t, "--model-keys=dashscope_qwen3_coder,kmodel")
	got, err := c.Models(context.Background())
	want := []chat.Model{{ID: "dashscope_qwen3_coder", Name: "Qwen3-Coder"}, {ID: "kmodel", Name: "Kimi"}}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("Models() = %+v, %v; want %+v", got, err, want)
	}
}

func TestChatText(t *testing.T) {
	_, c := newSim(t)
	tests := []struct {
		give string
		want string
	}{
		{give: "hello there", want: "You said: hello there"},
		{give: "split me [[sim:chunks=3]] [[sim:chunk-delay=1ms]] [[sim:think]]", want: "You said: split me"},
		{give: "<<<odd>>> text", want: "You said: <<<odd>>> text"},
	}
	for _, tt := range tests {
		a := runTurn(t, c, &chat.Turn{Messages: user(tt.give), Model: "kmodel"})
		if a.err != nil || a.text != tt.want || a.done.Finish != chat.FinishStop || a.done.SessionID == "" {
			t.Errorf("answer = %q, %+v, %v; want %q and a session", a.text, a.done, a.err, tt.want)
		}
	}
}

func TestSessionReuse(t *testing.T) {
	_, c := newSim(t)
	first := runTurn(t, c, &chat.Turn{Messages: user("one")})
	if first.err != nil {
		t.Fatalf("first turn: %v", first.err)
	}
	sid := first.done.SessionID
	second := runTurn(t, c, &chat.Turn{SessionID: sid, Messages: user("two [[sim:whoami]]")})
	want := "session=" + sid + " turn=2 reply=true"
	if second.err != nil || !strings.HasPrefix(second.text, want) || second.done.SessionID != sid {
		t.Errorf("second turn = %q, %+v, %v; want %q...", second.text, second.done, second.err, want)
	}

	if err := c.DeleteSession(context.Background(), sid); err != nil {
		t.Fatalf("DeleteSession: %v", err)
	}
	gone := runTurn(t, c, &chat.Turn{SessionID: sid, Messages: user("three")})
	var ue *chat.UpstreamError
	if !errors.As(gone.err, &ue) || ue.Status != 500 || ue.Message != "session not found" {
		t.Errorf("turn on a deleted session: %v, want UpstreamError 500 session not found", gone.err)
	}
}

var weatherTool = chat.Tool{
	Name:       "get_weather",
	Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`),
}

func TestToolCalls(t *testing.T) {
	_, c := newSim(t)
	for _, directive := range []string{"", " [[sim:tool_code]]"} {
		msgs := []chat.Message{
			{Role: chat.RoleSystem, Content: "Be brief."},
			{Role: chat.RoleUser, Content: "Paris" + directive},
		}
		a := runTurn(t, c, &chat.Turn{Messages: msgs, Tools: []chat.Tool{weatherTool}})
		if a.err != nil || len(a.calls) != 1 || a.text != "" || a.done.Finish != chat.FinishToolCalls {
			t.Fatalf("answer%s = %q %+v %+v %v; want one call", directive, a.text, a.calls, a.done, a.err)
		}
		call := a.calls[0]
		if call.Name != "get_weather" || call.Arguments != `{"city":"Paris"}` || !strings.HasPrefix(call.ID, "call_") {
			t.Errorf("call%s = %+v, want get_weather with city Paris", directive, call)
		}

		// The follow-up turn continues the session with only the new messages.
		next := []chat.Message{
			{Role: chat.RoleAssistant, ToolCalls: a.calls},
			{Role: chat.RoleTool, ToolCallID: call.ID, Content: "18C and sunny"},
		}
		b := runTurn(t, c, &chat.Turn{SessionID: a.done.SessionID, Messages: next, Tools: []chat.Tool{weatherTool}})
		if b.err != nil || b.text != "Tool get_weather returned: 18C and sunny" || b.done.Finish != chat.FinishStop {
			t.Errorf("result turn%s = %q %+v %v", directive, b.text, b.done, b.err)
		}
	}
}

func TestChatErrors(t *testing.T) {
	_, c := newSim(t)
	a := runTurn(t, c, &chat.Turn{Messages: user("x [[sim:ratelimit=2s]]")})
	var rl *chat.RateLimitedError
	if !errors.As(a.err, &rl) || rl.RetryAfter != 2*time.Second {
		t.Errorf("rate limit: %v, want RateLimitedError retry after 2s", a.err)
	}
	a = runTurn(t, c, &chat.Turn{Messages: user("x [[sim:error-after=2]] [[sim:chunks=4]]")})
	var ue *chat.UpstreamError
	if !errors.As(a.err, &ue) || ue.Status != 500 || ue.Message != "simulated error" || a.text == "" {
		t.Errorf("error after 2 deltas: %q %v, want some text then UpstreamError 500 with the worker's message", a.text, a.err)
	}
	// A finish with the plugin's timeout status is a timeout, not a 502.
	a = runTurn(t, c, &chat.Turn{Messages: user("x [[sim:timeout]]")})
	if !errors.Is(a.err, context.DeadlineExceeded) || errors.As(a.err, &ue) {
		t.Errorf("finish 408: %v, want a DeadlineExceeded", a.err)
	}
}

func TestCancelSendsStop(t *testing.T) {
	_, c := newSim(t)
	ctx, cancel := context.WithCancel(context.Background())
	turn := &chat.Turn{RequestID: "req-hang", Messages: user("wait [[sim:hang]]")}
	ans, err := c.Start(ctx, turn)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	cancel()
	start := time.Now()
	a := collect(t, ans)
	if !errors.Is(a.err, context.Canceled) || time.Since(start) > time.Second {
		t.Errorf("cancelled turn ended with %v after %s, want context.Canceled at once", a.err, time.Since(start))
	}
	if n := openTurns(c); n != 0 {
		t.Errorf("%d turns still registered after the cancelled answer was closed", n)
	}
	// The same gateway request id again (a retry on this worker) must not
	// see the stopped turn's late chat/finish.
	if a := runTurn(t, c, &chat.Turn{RequestID: "req-hang", Messages: user("again")}); a.text != "You said: again" {
		t.Errorf("turn after stop = %q, %v", a.text, a.err)
	}
}

func TestTurnTimeout(t *testing.T) {
	w := startSim(t, "--logged-in")
	c := connect(t, w, Config{TurnTimeout: 200 * time.Millisecond})
	a := runTurn(t, c, &chat.Turn{Messages: user("[[sim:hang]]")})
	if !errors.Is(a.err, context.DeadlineExceeded) {
		t.Errorf("hung turn: %v, want DeadlineExceeded", a.err)
	}
	a = runTurn(t, c, &chat.Turn{Messages: user("[[sim:hang]]")})
	if !errors.Is(a.err, context.DeadlineExceeded) {
		t.Errorf("second hung turn: %v, want DeadlineExceeded", a.err)
	}
}

func TestWorkerGone(t *testing.T) {
	w, c := newSim(t)
	ans, err := c.Start(context.Background(), &chat.Turn{Messages: user("[[sim:hang]]")})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	w.Stop()
	if a := collect(t, ans); !errors.Is(a.err, chat.ErrWorkerGone) {
		t.Errorf("turn on a stopped worker: %v, want ErrWorkerGone", a.err)
	}
	if _, err := c.Status(context.Background()); !errors.Is(err, chat.ErrWorkerGone) {
		t.Errorf("Status() after the drop = %v, want ErrWorkerGone", err)
	}
	if _, err := c.Start(context.Background(), &chat.Turn{Messages: user("hi")}); !errors.Is(err, chat.ErrWorkerGone) {
		t.Errorf("Start() after the drop = %v, want ErrWorkerGone", err)
	}
}

// TestConcurrent runs turns and health checks side by side, for the race
// detector and for routing by requestId.
func TestConcurrent(t *testing.T) {
	_, c := newSim(t)
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			want := "You said: n" + strconv.Itoa(i) + " a b c d e"
			a := runTurn(t, c, &chat.Turn{Messages: user("n" + strconv.Itoa(i) + " a b c d e [[sim:chunks=5]] [[sim:chunk-delay=2ms]]")})
			if a.err != nil || a.text != want {
				t.Errorf("turn %d = %q, %v; want %q", i, a.text, a.err, want)
			}
		})
		wg.Go(func() {
			for range 10 {
				if _, err := c.Status(context.Background()); err != nil {
					t.Errorf("Status: %v", err)
				}
			}
		})
	}
	wg.Wait()
}

// TestPrepare: each worker gets its own home, temp and runtime dirs under
// its work dir, made private before it starts, unless isolation is off.
func TestPrepare(t *testing.T) {
	dir := t.TempDir()
	env, err := New(Config{}).Prepare(worker.Endpoint{Name: "a", WorkDir: dir})
	want := []string{"HOME=" + filepath.Join(dir, "home"), "TMPDIR=" + filepath.Join(dir, "tmp"),
		"XDG_RUNTIME_DIR=" + filepath.Join(dir, "run")}
	if err != nil || !slices.Equal(env, want) {
		t.Fatalf("Prepare = %q, %v; want %q", env, err, want)
	}
	for _, sub := range []string{"home", "tmp", "run"} {
		if fi, err := os.Stat(filepath.Join(dir, sub)); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v, want a private dir", sub, fi, err)
		}
	}
	if env, err := New(Config{NoIsolation: true}).Prepare(worker.Endpoint{WorkDir: dir}); err != nil || env != nil {
		t.Errorf("Prepare without isolation = %q, %v; want nothing", env, err)
	}
}
