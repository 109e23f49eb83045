package relay

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/chat/chattest"
	"github.com/poolgate/poolgate/internal/testenv"
)

// fakeStream is a protocol encoder that writes one event per call, named
// after the call, so a transcript shows what the relay asked for.
type fakeStream struct{ w EventWriter }

func (f *fakeStream) Open() error                     { return f.w.Event("open", nil) }
func (f *fakeStream) Text(s string) error             { return f.w.Event("text", []byte(s)) }
func (f *fakeStream) ToolCall(tc chat.ToolCall) error { return f.w.Event("call", []byte(tc.Name)) }
func (f *fakeStream) Done(ev chat.Event) error        { return f.w.Event("done", []byte(ev.Finish)) }
func (f *fakeStream) Fail(p *apierr.Problem) error {
	return f.w.Event("fail", fmt.Appendf(nil, "%d %s", p.Status, p.Code))
}
func (f *fakeStream) KeepAlive() error { return f.w.Comment("ka") }

// writeError is a protocol's JSON error: the status, and the code as body.
func writeError(w http.ResponseWriter, p *apierr.Problem) {
	httpx.WriteJSON(w, p.Status, []byte(`{"code":"`+p.Code+`"}`))
}

// runStream relays one streamed answer from p and returns the status, the
// body and the outcome.
func runStream(ctx context.Context, p *chattest.Source, keepAlive time.Duration) (int, string, Outcome) {
	rl := New(Config{Options: Options{KeepAlive: keepAlive}, Protocol: "test", WriteError: writeError}, nil)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rec := httptest.NewRecorder()
	out := streamFrom(ctx, cancel, rl, rl.NewStream(rec, ""), p)
	return rec.Code, rec.Body.String(), out
}

// streamFrom streams p's answer through a fakeStream the way the edge
// does: started before the answer is opened, a turn p says another replica
// holds carried there while the response is untouched.
func streamFrom(ctx context.Context, cancel context.CancelFunc, rl *Relay, sse *SSE, p *chattest.Source) Outcome {
	st := rl.Start(ctx, cancel, sse, &fakeStream{w: sse})
	req := &chat.Request{Stream: true}
	ans, holder, err := p.Open(ctx, req, true)
	if holder != "" {
		if st.Hop(holder, func() error { return p.Hop(ctx, holder) }) {
			st.Stop()
			return Outcome{Forwarded: true}
		}
		ans, _, err = p.Open(ctx, req, false)
	}
	return st.Relay(ans, err)
}

func text(s string) chat.Event { return chat.Event{Type: chat.EventText, Text: s} }

var done = chat.Event{Type: chat.EventDone, Finish: chat.FinishStop}

func TestStream(t *testing.T) {
	upstream := &chat.UpstreamError{Status: 500, Message: "crashed"}
	tests := []struct {
		name       string
		give       *chattest.Source
		keepAlive  time.Duration
		deadline   time.Duration // of the request; 0 for none
		wantStatus int
		want       string // the body, with "event: " and "data: " lines joined
		wantErr    error
		wantStart  bool
	}{
		{name: "answer", give: &chattest.Source{Events: []chat.Event{text("a"), {Type: chat.EventToolCall, ToolCall: chat.ToolCall{Name: "f"}}, done}},
			wantStatus: 200, want: "open| text a| call f| done stop|", wantStart: true},
		{name: "empty answer opens the stream", give: &chattest.Source{Events: []chat.Event{done}},
			wantStatus: 200, want: "open| done stop|", wantStart: true},
		{name: "slow start opens early and keeps alive", give: &chattest.Source{Delay: 25 * time.Second, Events: []chat.Event{text("a"), done}},
			keepAlive: 10 * time.Second, wantStatus: 200, want: "open| : ka| : ka| text a| done stop|", wantStart: true},
		{name: "quiet stream keeps alive", give: &chattest.Source{Events: []chat.Event{text("a"), done}, Pause: 25 * time.Second}, keepAlive: 10 * time.Second,
			wantStatus: 200, want: "open| text a| : ka| : ka| done stop|", wantStart: true},
		{name: "keep-alives off", give: &chattest.Source{Delay: 25 * time.Second, Events: []chat.Event{text("a"), done}},
			keepAlive: -1, wantStatus: 200, want: "open| text a| done stop|", wantStart: true},
		{name: "error before the start is a JSON status", give: &chattest.Source{Err: chat.ErrNoInstance},
			wantStatus: 503, want: `{"code":"no_instance"}`, wantErr: chat.ErrNoInstance},
		{name: "error as the first event is a JSON status", give: &chattest.Source{Events: []chat.Event{{Type: chat.EventError, Err: upstream}}},
			wantStatus: 502, want: `{"code":"upstream_error"}`, wantErr: upstream},
		{name: "error after a slow start is in-stream", give: &chattest.Source{Delay: 15 * time.Second, Err: &chat.OverloadedError{}},
			keepAlive: 10 * time.Second, wantStatus: 200, want: "open| : ka| fail 429 overloaded|", wantErr: &chat.OverloadedError{}, wantStart: true},
		{name: "error mid-stream", give: &chattest.Source{Events: []chat.Event{text("a"), {Type: chat.EventError, Err: upstream}}},
			wantStatus: 200, want: "open| text a| fail 502 upstream_error|", wantErr: upstream, wantStart: true},
		{name: "an error event without an error is a lost worker", give: &chattest.Source{Events: []chat.Event{text("a"), {Type: chat.EventError}}},
			wantStatus: 200, want: "open| text a| fail 502 worker_gone|", wantErr: chat.ErrWorkerGone, wantStart: true},
		{name: "a stream closed without an ending is a lost worker", give: &chattest.Source{Events: []chat.Event{text("a")}},
			wantStatus: 200, want: "open| text a| fail 502 worker_gone|", wantErr: chat.ErrWorkerGone, wantStart: true},
		{name: "a deadline mid-stream is told", give: &chattest.Source{Events: []chat.Event{text("a"), done}, Pause: time.Hour}, deadline: time.Minute, keepAlive: -1,
			wantStatus: 200, want: "open| text a| fail 504 timeout|", wantErr: context.DeadlineExceeded, wantStart: true},
		{name: "a turn another replica holds is carried there", give: &chattest.Source{Holder: "http://b", Events: []chat.Event{text("a"), done}},
			wantStatus: 200, want: ""},
		{name: "a hop that fails is served here", give: &chattest.Source{Holder: "http://b", HopErr: errors.New("refused"), Events: []chat.Event{text("a"), done}},
			wantStatus: 200, want: "open| text a| done stop|", wantStart: true},
		{name: "no hop once keep-alives started the response", give: &chattest.Source{Delay: 12 * time.Second, Holder: "http://b", Events: []chat.Event{text("a"), done}},
			keepAlive: 10 * time.Second, wantStatus: 200, want: "open| : ka| : ka| text a| done stop|", wantStart: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				if tt.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tt.deadline)
					defer cancel()
				}
				status, body, out := runStream(ctx, tt.give, tt.keepAlive)
				if got := flat(body); status != tt.wantStatus || got != tt.want {
					t.Errorf("got %d %q, want %d %q", status, got, tt.wantStatus, tt.want)
				}
				if !sameErr(out.Err, tt.wantErr) || out.Started != tt.wantStart {
					t.Errorf("outcome %+v, want err %v started %v", out, tt.wantErr, tt.wantStart)
				}
			})
		})
	}
}

func sameErr(got, want error) bool {
	if want == nil || got == nil {
		return got == want
	}
	var ole *chat.OverloadedError
	if errors.As(want, &ole) {
		return errors.As(got, &ole)
	}
	return errors.Is(got, want)
}

// flat joins an SSE body's lines: "event: x\ndata: y\n\n" becomes "x y|",
// a comment ": c\n\n" becomes ": c|".
func flat(body string) string {
	if !strings.Contains(body, "\n\n") {
		return body
	}
	var b strings.Builder
	for _, frame := range strings.Split(strings.TrimSuffix(body, "\n\n"), "\n\n") {
		frame = strings.ReplaceAll(frame, "event: ", "")
		frame = strings.ReplaceAll(frame, "\ndata: ", " ")
		b.WriteString(strings.TrimSuffix(strings.ReplaceAll(frame, "data: ", ""), " ") + "| ")
	}
	return strings.TrimSuffix(b.String(), " ")
}

// While another replica's answer is copied to the client, the relay's
// keep-alives write nothing: the response is the hop's.
func TestKeepAlivesPauseWhileAHopCopiesTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &chattest.Source{Holder: "http://b", HopTime: 35 * time.Second}
		status, body, out := runStream(context.Background(), p, 10*time.Second)
		if status != 200 || body != "" || !out.Forwarded || len(p.Hops()) != 1 {
			t.Errorf("got %d %q %+v after %d hops, want nothing written by the relay", status, body, out, len(p.Hops()))
		}
	})
}

func TestReply(t *testing.T) {
	tests := []struct {
		name       string
		give       *chattest.Source
		wantStatus int
		wantBody   string
	}{
		{"answer", &chattest.Source{Events: []chat.Event{text("a"), {Type: chat.EventToolCall, ToolCall: chat.ToolCall{Name: "f"}}, text("b"), done}},
			200, `{"text":"ab","calls":1,"finish":"stop"}`},
		{"error before the answer", &chattest.Source{Err: &chat.RateLimitedError{RetryAfter: time.Second}}, 429, `{"code":"rate_limit_exceeded"}`},
		{"error in the answer", &chattest.Source{Events: []chat.Event{text("a"), {Type: chat.EventError, Err: chat.ErrNotLoggedIn}}}, 503, `{"code":"not_logged_in"}`},
		{"answer without an ending", &chattest.Source{Events: []chat.Event{text("a")}}, 502, `{"code":"worker_gone"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rl := New(Config{WriteError: writeError}, nil)
			rec := httptest.NewRecorder()
			ans, _, err := tt.give.Open(context.Background(), &chat.Request{}, false)
			rl.Collect(context.Background(), rec, ans, err, &fakeReply{})
			if rec.Code != tt.wantStatus || rec.Body.String() != tt.wantBody {
				t.Errorf("got %d %s, want %d %s", rec.Code, rec.Body, tt.wantStatus, tt.wantBody)
			}
		})
	}
}

type fakeReply struct{ Collected }

func (f *fakeReply) Body(done chat.Event) ([]byte, error) {
	return fmt.Appendf(nil, `{"text":%q,"calls":%d,"finish":%q}`, f.Content(), len(f.Calls), done.Finish), nil
}

// A client that went away is told nothing; the status left for the access
// log and the metrics is 499.
func TestFailWhenTheClientIsGone(t *testing.T) {
	rl := New(Config{WriteError: writeError}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		give       error
		wantStatus int
		wantBody   string
	}{
		{context.Canceled, 499, ""},
		{chat.ErrNoInstance, 499, ""},
		// The body timeout ends the request too, but its client waits.
		{httpx.ErrBodyTimeout, 408, `{"code":"request_timeout"}`},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		rl.Fail(ctx, rec, tt.give)
		if rec.Code != tt.wantStatus || rec.Body.String() != tt.wantBody {
			t.Errorf("%v: got %d %q, want %d %q", tt.give, rec.Code, rec.Body, tt.wantStatus, tt.wantBody)
		}
	}
}

// Through a real server: the client reads the first event and hangs up; the
// worker's turn ends and the stream gets no ending after it.
func TestClientHangsUpMidStream(t *testing.T) {
	// The answer says "partial", then waits for the request to end, as a
	// worker does that is cut off.
	p := &chattest.Source{Events: []chat.Event{text("partial")}, Hang: true}
	outcomes := make(chan Outcome, 1)
	rl := New(Config{Options: Options{KeepAlive: 50 * time.Millisecond}, Protocol: "test", WriteError: writeError}, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		sse := rl.NewStream(w, "")
		outcomes <- streamFrom(ctx, cancel, rl, sse, p)
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" || resp.Header.Get("X-Accel-Buffering") != "no" {
		t.Errorf("headers %v, want an unbuffered event stream", resp.Header)
	}
	lines := bufio.NewReader(resp.Body)
	for {
		line, err := lines.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended before the first text: %v", err)
		}
		if line == "data: partial\n" {
			break
		}
	}
	resp.Body.Close()
	testenv.WaitFor(t, 5*time.Second, "the worker's turn to end", func() bool {
		select {
		case <-p.Answers()[0].Closed():
			return true
		default:
			return false
		}
	})
	select {
	case out := <-outcomes:
		if out.Err == nil || !out.Started {
			t.Errorf("outcome %+v, want a started stream that ended with an error", out)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the relay did not return after the client hung up")
	}
}

// Through a real server, a slow answer reaches the client after keep-alive
// comments, and the stream ends with the protocol's ending.
func TestSlowAnswerThroughAServer(t *testing.T) {
	rl := New(Config{Options: Options{KeepAlive: 20 * time.Millisecond}, Protocol: "test", WriteError: writeError}, nil)
	p := &chattest.Source{Delay: 70 * time.Millisecond, Events: []chat.Event{text("late"), done}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		sse := rl.NewStream(w, "")
		streamFrom(ctx, cancel, rl, sse, p)
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if got := flat(string(b)); !testenv.InOrder(got, []string{"open|", ": ka|", "text late|", "done stop|"}) || !strings.HasSuffix(got, "done stop|") {
		t.Errorf("got %q, want open, keep-alives, the text and done last", got)
	}
}

// flushes records what each flush sent.
type flushes struct {
	h       http.Header
	pending strings.Builder
	sent    []string
}

func (f *flushes) Header() http.Header { return f.h }
func (f *flushes) WriteHeader(int)     {}
func (f *flushes) Write(b []byte) (int, error) {
	return f.pending.Write(b)
}
func (f *flushes) Flush() {
	f.sent = append(f.sent, f.pending.String())
	f.pending.Reset()
}

func TestBurstWritesTheFirstEventAtOnce(t *testing.T) {
	// The whole answer is at hand at once, as when a worker sends its
	// events faster than they are written.
	rl := New(Config{Options: Options{KeepAlive: -1}, Protocol: "test", WriteError: writeError}, nil)
	p := &chattest.Source{Events: []chat.Event{text("a"), text("b"), text("c"), done}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &flushes{h: http.Header{}}
	sse := rl.NewStream(w, "")
	if out := streamFrom(ctx, cancel, rl, sse, p); out.Err != nil {
		t.Fatal(out.Err)
	}
	// The opening goes out with the first event, alone; the events behind
	// it, already at hand, go out together with the closing one.
	want := []string{"event: open\ndata: \n\nevent: text\ndata: a\n\n",
		"event: text\ndata: b\n\nevent: text\ndata: c\n\nevent: done\ndata: stop\n\n"}
	if strings.Join(w.sent, "|") != strings.Join(want, "|") {
		t.Errorf("flushes\n%q\nwant\n%q", w.sent, want)
	}
}

// goneWriter is a client that went away: every write fails.
type goneWriter struct{ h http.Header }

var errClientGone = errors.New("client gone")

func (g *goneWriter) Header() http.Header       { return g.h }
func (g *goneWriter) WriteHeader(int)           {}
func (g *goneWriter) Write([]byte) (int, error) { return 0, errClientGone }

// While the answer is awaited (the request queues, or the router holds it
// back), the keep-alive timer writes one comment per quiet interval; one
// that fails cancels the request at once, and the relay returns its error.
func TestKeepAliveWhileTheAnswerIsAwaited(t *testing.T) {
	tests := []struct {
		name      string
		wait      time.Duration
		wantTicks int
	}{
		{"quick answer, no keep-alive", 5 * time.Second, 0},
		{"slow answer, one keep-alive per interval", 35 * time.Second, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				p := &chattest.Source{Delay: tt.wait, Events: []chat.Event{text("late"), done}}
				status, body, out := runStream(context.Background(), p, 10*time.Second)
				if n := strings.Count(body, ": ka\n"); status != 200 || out.Err != nil || n != tt.wantTicks ||
					!strings.HasSuffix(flat(body), "text late| done stop|") {
					t.Errorf("got %d, %d keep-alives, %+v:\n%s\nwant %d keep-alives and the answer", status, n, out, body, tt.wantTicks)
				}
			})
		})
	}
	t.Run("a failed keep-alive ends the wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			rl := New(Config{Options: Options{KeepAlive: 10 * time.Second}, Protocol: "test", WriteError: writeError}, nil)
			p := &chattest.Source{Delay: time.Hour}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			sse := rl.NewStream(&goneWriter{h: http.Header{}}, "")
			start := time.Now()
			out := streamFrom(ctx, cancel, rl, sse, p)
			if took := time.Since(start); !errors.Is(out.Err, errClientGone) || took != 10*time.Second || ctx.Err() == nil {
				t.Errorf("outcome %+v after %s (request %v), want the write's error at the first keep-alive, the request cancelled",
					out, took, ctx.Err())
			}
		})
	})
}
