package modelserver

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
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

// startSim runs sim.Main with --protocol=openai on a free port until the
// test ends. [[sim:crash]] is not used: in process it would exit the test.
func startSim(t *testing.T, extra ...string) *workertest.Worker {
	t.Helper()
	args := func(ep worker.Endpoint) []string {
		return append([]string{"start", "--protocol=openai", "--httpPort", strconv.Itoa(ep.Port), "--workDir", ep.WorkDir}, extra...)
	}
	return workertest.Start(t, "acct-1", args, nil, nil, wait)
}

// newDriver returns a driver whose idle connections are dropped at cleanup.
func newDriver(t testing.TB, cfg Config) *Driver {
	t.Helper()
	d := New(cfg)
	t.Cleanup(d.Close)
	return d
}

// connect connects d to the worker at ep as the supervisor does.
func connect(t testing.TB, d *Driver, ep worker.Endpoint) *Client {
	t.Helper()
	return workertest.Connect[*Client](t, d, ep, wait)
}

func newSim(t *testing.T, cfg Config, extra ...string) (*workertest.Worker, *Client) {
	t.Helper()
	w := startSim(t, extra...)
	return w, connect(t, newDriver(t, cfg), w.Endpoint)
}

// answer is a whole collected stream.
type answer struct {
	text   string
	deltas int
	calls  []chat.ToolCall
	done   *chat.Event
	err    error
}

// collect reads a to its end, within wait (see chattest.Read).
func collect(t testing.TB, a chat.Answer) answer {
	t.Helper()
	w := chattest.Read(t, a, wait)
	return answer{text: w.Text, deltas: w.Deltas, calls: w.Calls, done: w.Done, err: w.Err}
}

func userTurn(text string) *chat.Turn {
	return &chat.Turn{Model: "kmodel", Messages: []chat.Message{{Role: chat.RoleUser, Content: text}}}
}

func runTurn(t testing.TB, c *Client, turn *chat.Turn) answer {
	t.Helper()
	a, err := c.Start(context.Background(), turn)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return collect(t, a)
}

var weather = []chat.Tool{{Name: "get_weather", Description: "Weather in a city",
	Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)}}

func TestStatusAndModels(t *testing.T) {
	_, c := newSim(t, Config{}, "--model-keys=m1,m2")
	st, err := c.Status(context.Background())
	if err != nil || !st.LoggedIn {
		t.Errorf("Status = %+v, %v; want logged in", st, err)
	}
	models, err := c.Models(context.Background())
	want := []chat.Model{{ID: "m1", Name: "m1"}, {ID: "m2", Name: "m2"}}
	if err != nil || !slices.Equal(models, want) {
		t.Errorf("Models = %+v, %v; want %+v", models, err, want)
	}
}

func TestChatText(t *testing.T) {
	_, c := newSim(t, Config{})
	a := runTurn(t, c, userTurn("hello brave new world"))
	if a.err != nil {
		t.Fatalf("stream error: %v", a.err)
	}
	if a.text != "You said: hello brave new world" || a.deltas != 6 {
		t.Errorf("text = %q in %d deltas, want %q in 6", a.text, a.deltas, "You said: hello brave new world")
	}
	if a.done.Finish != chat.FinishStop {
		t.Errorf("finish = %q, want stop", a.done.Finish)
	}
	if u := a.done.Usage; u.InputTokens != 4 || u.OutputTokens != 6 {
		t.Errorf("usage = %+v, want 4 in, 6 out", u)
	}
}

func TestChatToolCallThenResult(t *testing.T) {
	_, c := newSim(t, Config{})
	turn := userTurn("Paris [[sim:chunks=4]]")
	turn.Tools = weather
	a := runTurn(t, c, turn)
	if a.err != nil || a.text != "" || len(a.calls) != 1 {
		t.Fatalf("answer = %+v, want one tool call and no text", a)
	}
	call := a.calls[0]
	var args map[string]string
	if err := json.Unmarshal([]byte(call.Arguments), &args); err != nil || args["city"] != "Paris" ||
		call.Name != "get_weather" || !strings.HasPrefix(call.ID, "call_") {
		t.Errorf("call = %+v (args %v), want get_weather {city: Paris} with a call_ id", call, err)
	}
	if a.done.Finish != chat.FinishToolCalls || a.done.Usage.OutputTokens == 0 {
		t.Errorf("done = %+v, want finish tool_calls with usage", a.done)
	}

	turn.Messages = append(turn.Messages,
		chat.Message{Role: chat.RoleAssistant, ToolCalls: a.calls},
		chat.Message{Role: chat.RoleTool, ToolCallID: call.ID, Content: "18C"})
	b := runTurn(t, c, turn)
	if b.err != nil || b.text != "Tool get_weather returned: 18C" || len(b.calls) != 0 || b.done.Finish != chat.FinishStop {
		t.Errorf("after tool result: %+v, want the text %q", b, "Tool get_weather returned: 18C")
	}
}

func TestChatToolChoice(t *testing.T) {
	tests := []struct {
		name string
		give chat.ToolChoice
		want string // the tool called, or "" for a text answer
	}{
		{"auto", chat.ToolChoice{}, "get_weather"},
		{"none", chat.ToolChoice{Mode: chat.ToolNone}, ""},
		{"required", chat.ToolChoice{Mode: chat.ToolRequired}, "get_weather"},
		{"named", chat.ToolChoice{Mode: chat.ToolNamed, Name: "get_weather"}, "get_weather"},
	}
	_, c := newSim(t, Config{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			turn := userTurn("Rome")
			turn.Tools, turn.ToolChoice = weather, tt.give
			a := runTurn(t, c, turn)
			got := ""
			for _, tc := range a.calls {
				got += tc.Name
			}
			if a.err != nil || got != tt.want {
				t.Errorf("called %q (err %v), want %q", got, a.err, tt.want)
			}
		})
	}
}

func TestChatErrorsBeforeFirstByte(t *testing.T) {
	_, c := newSim(t, Config{})
	tests := []struct {
		name       string
		give       string
		wantStatus int           // UpstreamError status, 0 for a rate limit
		wantRetry  time.Duration // RateLimitedError hint
	}{
		{"ratelimit default", "x [[sim:ratelimit]]", 0, time.Second},
		{"ratelimit 2s", "x [[sim:ratelimit=2s]]", 0, 2 * time.Second},
		{"server error", "x [[sim:error]]", 500, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := c.Start(context.Background(), userTurn(tt.give))
			if a != nil {
				a.Close()
				t.Fatalf("Start returned an answer, want an error")
			}
			var rl *chat.RateLimitedError
			var up *chat.UpstreamError
			switch {
			case errors.As(err, &rl):
				if tt.wantStatus != 0 || rl.RetryAfter != tt.wantRetry {
					t.Errorf("err = %#v, want retry after %s", rl, tt.wantRetry)
				}
			case errors.As(err, &up):
				if up.Status != tt.wantStatus || up.Message != "simulated error" {
					t.Errorf("err = %#v, want status %d and the server's message", up, tt.wantStatus)
				}
			default:
				t.Errorf("err = %v, want a typed upstream error", err)
			}
		})
	}
}

func TestChatErrorMidStream(t *testing.T) {
	_, c := newSim(t, Config{})
	a := runTurn(t, c, userTurn("a b c d [[sim:error-after=2]]"))
	var up *chat.UpstreamError
	if !errors.As(a.err, &up) || up.Message != "simulated error" {
		t.Fatalf("err = %v, want the in-stream UpstreamError", a.err)
	}
	if a.text != "You said: " || a.deltas != 2 {
		t.Errorf("text before the error = %q in %d deltas, want %q in 2", a.text, a.deltas, "You said: ")
	}
}

func TestChatCancel(t *testing.T) {
	_, c := newSim(t, Config{})

	t.Run("before the first byte", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		a, err := c.Start(ctx, userTurn("[[sim:hang]]"))
		if a != nil {
			a.Close()
		}
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
			t.Errorf("Start = %v after %s, want the context's error promptly", err, time.Since(start))
		}
	})

	t.Run("mid stream", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		a, err := c.Start(ctx, userTurn("a b c [[sim:chunk-delay=1h]]"))
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		if ev, ok := a.Next(); !ok || ev.Type != chat.EventText {
			a.Close()
			t.Fatalf("first event = %+v, %v; want text", ev, ok)
		}
		cancel()
		start := time.Now()
		rest := collect(t, a)
		if !errors.Is(rest.err, context.Canceled) || rest.deltas != 0 || time.Since(start) > 2*time.Second {
			t.Errorf("after cancel the answer went on with %+v for %s, want the context's error at once", rest, time.Since(start))
		}
		if n := busyConns(c); n != 0 {
			t.Errorf("%d connections still busy after the cancelled answer was closed", n)
		}
	})

	// Close waits for the turns in flight: none is left.
	closed := make(chan struct{})
	go func() { _ = c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not return: a cancelled turn is still registered")
	}
}

// busyConns is the number of the client's connections carrying a turn.
func busyConns(c *Client) int {
	c.conns.mu.Lock()
	defer c.conns.mu.Unlock()
	return len(c.conns.busy)
}

func TestChatRequestTimeout(t *testing.T) {
	_, c := newSim(t, Config{RequestTimeout: 300 * time.Millisecond})
	a := runTurn(t, c, userTurn("a b c [[sim:chunk-delay=1h]]"))
	if !errors.Is(a.err, chat.ErrWorkerGone) || a.deltas != 1 {
		t.Errorf("answer = %+v, want one delta then ErrWorkerGone", a)
	}
}

func TestCloseAbortsTurns(t *testing.T) {
	_, c := newSim(t, Config{})
	a, err := c.Start(context.Background(), userTurn("a b c [[sim:chunk-delay=1h]]"))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if ev, ok := a.Next(); !ok || ev.Type != chat.EventText {
		a.Close()
		t.Fatalf("first event = %+v, %v; want text", ev, ok)
	}
	// Close aborts the answer being read, and returns once its reader
	// closed it.
	done := make(chan struct{})
	go func() { _ = c.Close(); close(done) }()
	if rest := collect(t, a); !errors.Is(rest.err, chat.ErrWorkerGone) {
		t.Errorf("answer after Close = %+v, want it cut with ErrWorkerGone", rest)
	}
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not return")
	}
	if busyConns(c) != 0 {
		t.Errorf("connections still busy after Close")
	}
	if _, err := c.Start(context.Background(), userTurn("hi")); !errors.Is(err, chat.ErrWorkerGone) {
		t.Errorf("Start after Close = %v, want ErrWorkerGone", err)
	}
}

func TestWorkerGone(t *testing.T) {
	w, c := newSim(t, Config{})
	w.Stop()
	// Nothing reached the worker: the router may try another one.
	if _, err := c.Start(context.Background(), userTurn("hi")); !errors.Is(err, chat.ErrWorkerGone) || !errors.Is(err, chat.ErrNotSent) {
		t.Errorf("Start to a stopped worker = %v, want ErrWorkerGone and ErrNotSent", err)
	}
	if _, err := c.Status(context.Background()); !errors.Is(err, chat.ErrWorkerGone) {
		t.Errorf("Status of a stopped worker = %v, want ErrWorkerGone", err)
	}
	d := newDriver(t, Config{})
	if _, err := d.Connect(context.Background(), worker.Endpoint{Name: "x", Port: testenv.FreePort(t)}); !errors.Is(err, chat.ErrWorkerGone) {
		t.Errorf("Connect to a closed port = %v, want ErrWorkerGone", err)
	}
}

func TestCommand(t *testing.T) {
	d := New(Config{Command: []string{"llama-server", "--port", "{port}", "--slot-save-path={workdir}/slots",
		"--alias", "{account.name}", "--user={account.username}", "--aux={auxport}", "{unknown}"}})
	got := d.Command(worker.Endpoint{Name: "acct-2", WorkDir: "/w/2", Port: 7001, AuxPort: 7002,
		Account: worker.Account{Name: "acct-2", Username: "me@example.com"}})
	want := []string{"llama-server", "--port", "7001", "--slot-save-path=/w/2/slots",
		"--alias", "acct-2", "--user=me@example.com", "--aux=7002", "{unknown}"}
	if !slices.Equal(got, want) {
		t.Errorf("Command = %q, want %q", got, want)
	}
	if got := New(Config{}).Command(worker.Endpoint{Port: 1}); got != nil {
		t.Errorf("Command without a template = %q, want nil", got)
	}
}
