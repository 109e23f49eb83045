package lingma

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/lingmarpc"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/worker"
)

// fake is a scripted Lingma worker for the edge cases the simulator does not
// produce: split frames, silence, a drop in the middle of a turn.
type fake struct {
	t      *testing.T
	port   int
	script func(fc *fakeConn, m *lingmarpc.Message)

	mu      sync.Mutex
	methods []string
	sizes   []int                // the JSON size of each request, beside methods
	replies []*lingmarpc.Message // the client's responses to our requests
}

type fakeConn struct {
	ws *websocket.Conn
	f  *fake
}

// newFake serves script, which sees every client request except initialize
// (answered {}) and chat/stop (recorded, answered {}).
func newFake(t *testing.T, script func(fc *fakeConn, m *lingmarpc.Message)) *fake {
	t.Helper()
	f := &fake{t: t, script: script}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	f.port, _ = strconv.Atoi(u.Port())
	return f
}

func (f *fake) serve(w http.ResponseWriter, r *http.Request) {
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	defer ws.CloseNow()
	ws.SetReadLimit(readLimit)
	fc := &fakeConn{ws: ws, f: f}
	var buf []byte
	for {
		_, data, err := ws.Read(r.Context())
		if err != nil {
			return
		}
		buf = append(buf, data...)
		for {
			body, rest, err := lingmarpc.Split(buf)
			if err != nil {
				break
			}
			buf = rest
			m, err := lingmarpc.Decode(body)
			if err != nil {
				f.t.Errorf("fake: %v", err)
				continue
			}
			f.mu.Lock()
			if m.IsResponse() {
				f.replies = append(f.replies, m)
			} else {
				f.methods = append(f.methods, m.Method)
				f.sizes = append(f.sizes, len(body))
			}
			f.mu.Unlock()
			switch {
			case m.IsResponse():
			case m.Method == "initialize" || m.Method == "chat/stop":
				fc.reply(m.ID, struct{}{})
			default:
				f.script(fc, m)
			}
		}
	}
}

func (f *fake) seen() ([]string, []*lingmarpc.Message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.methods), slices.Clone(f.replies)
}

func (fc *fakeConn) frame(m *lingmarpc.Message) []byte {
	b, err := lingmarpc.Encode(m)
	if err != nil {
		fc.f.t.Errorf("fake encode: %v", err)
	}
	return b
}

func (fc *fakeConn) write(b []byte) {
	_ = fc.ws.Write(context.Background(), websocket.MessageText, b)
}

func (fc *fakeConn) reply(id json.RawMessage, result any) {
	raw, _ := json.Marshal(result)
	fc.write(fc.frame(&lingmarpc.Message{ID: id, Result: raw}))
}

// notify sends a server-to-client request (id set) or notification.
func (fc *fakeConn) notify(id, method string, params any) {
	raw, _ := json.Marshal(params)
	m := &lingmarpc.Message{Method: method, Params: raw}
	if id != "" {
		m.ID = json.RawMessage(id)
	}
	fc.write(fc.frame(m))
}

func requestID(m *lingmarpc.Message) string {
	var p struct {
		RequestID string `json:"requestId"`
	}
	_ = json.Unmarshal(m.Params, &p)
	return p.RequestID
}

func fakeClient(t *testing.T, f *fake, cfg Config) *Client {
	t.Helper()
	b, err := New(cfg).Connect(context.Background(), worker.Endpoint{Name: "fake", Port: f.port})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	c := b.(*Client)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestFraming(t *testing.T) {
	f := newFake(t, func(fc *fakeConn, m *lingmarpc.Message) {
		// A server request and the answer in one WebSocket message, the
		// answer's frame split over two more.
		b := fc.frame(&lingmarpc.Message{ID: json.RawMessage(`"srv-1"`), Method: "session/title/update", Params: json.RawMessage(`{}`)})
		raw, _ := json.Marshal(map[string]any{"status": 2, "id": 42, "name": "neo"})
		ans := fc.frame(&lingmarpc.Message{ID: m.ID, Result: raw})
		fc.write(append(b, ans[:10]...))
		fc.write(ans[10:])
	})
	c := fakeClient(t, f, Config{})
	st, err := c.Status(context.Background())
	if err != nil || !st.LoggedIn || st.Account != "neo" {
		t.Fatalf("Status() = %+v, %v; want logged in as neo", st, err)
	}
	var replies []*lingmarpc.Message
	testenv.WaitFor(t, wait, "the client to answer the server's request", func() bool {
		_, replies = f.seen()
		return len(replies) == 1
	})
	if string(replies[0].ID) != `"srv-1"` || string(replies[0].Result) != "{}" {
		t.Errorf("reply = %s %s, want id \"srv-1\" and {}", replies[0].ID, replies[0].Result)
	}
}

// waitStop waits until the fake worker has received chat/stop: the client
// sends it on its own time, after the turn's answer ended.
func waitStop(t *testing.T, f *fake) {
	t.Helper()
	testenv.WaitFor(t, wait, "chat/stop at the worker", func() bool {
		methods, _ := f.seen()
		return slices.Contains(methods, "chat/stop")
	})
}

func TestCallTimeout(t *testing.T) {
	f := newFake(t, func(fc *fakeConn, m *lingmarpc.Message) {
		if m.Method == "config/queryModels" {
			fc.reply(m.ID, []map[string]string{{"key": "a"}, {"key": "b", "displayName": "B"}, {"key": "a"}})
		} // auth/status is never answered
	})
	c := fakeClient(t, f, Config{CallTimeout: 100 * time.Millisecond})
	if _, err := c.Status(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Status() on a silent worker = %v, want DeadlineExceeded", err)
	}
	got, err := c.Models(context.Background())
	want := []chat.Model{{ID: "a", Name: "a"}, {ID: "b", Name: "B"}}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("Models() after a timeout = %+v, %v; want %+v", got, err, want)
	}
}

// askThen acknowledges chat/ask and runs then with the turn's requestId.
func askThen(then func(fc *fakeConn, reqID string)) func(*fakeConn, *lingmarpc.Message) {
	return func(fc *fakeConn, m *lingmarpc.Message) {
		if m.Method != "chat/ask" {
			fc.reply(m.ID, struct{}{})
			return
		}
		fc.reply(m.ID, map[string]bool{"success": true})
		then(fc, requestID(m))
	}
}

func TestDropMidTurn(t *testing.T) {
	f := newFake(t, askThen(func(fc *fakeConn, reqID string) {
		fc.notify(`1`, "chat/answer", map[string]string{"requestId": reqID, "text": "par"})
		time.Sleep(20 * time.Millisecond)
		_ = fc.ws.CloseNow()
	}))
	c := fakeClient(t, f, Config{})
	a := runTurn(t, c, &chat.Turn{Messages: user("hi")})
	if a.text != "par" || !errors.Is(a.err, chat.ErrWorkerGone) {
		t.Errorf("answer = %q, %v; want \"par\" then ErrWorkerGone", a.text, a.err)
	}
}

func TestRouting(t *testing.T) {
	f := newFake(t, askThen(func(fc *fakeConn, reqID string) {
		fc.notify(`7`, "chat/answer", map[string]string{"requestId": "other", "text": "NOT MINE"})
		fc.notify(``, "chat/think", map[string]string{"requestId": reqID, "text": "hmm"})
		fc.notify(`8`, "chat/finish", map[string]any{"requestId": reqID, "sessionId": "s-9", "statusCode": "200",
			"fullAnswer": "whole answer"})
	}))
	c := fakeClient(t, f, Config{})
	a := runTurn(t, c, &chat.Turn{Messages: user("hi")})
	if a.err != nil || a.text != "whole answer" || a.done.SessionID != "s-9" {
		t.Errorf("answer = %q, %+v, %v; want the fullAnswer of our turn in s-9", a.text, a.done, a.err)
	}
}

func TestStopOnSilence(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{name: "reply timeout", cfg: Config{ReplyTimeout: 100 * time.Millisecond}, want: context.DeadlineExceeded,
			ctx: func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }},
		{name: "caller deadline", cfg: Config{}, want: context.DeadlineExceeded,
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 100*time.Millisecond)
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, askThen(func(*fakeConn, string) {}))
			c := fakeClient(t, f, tt.cfg)
			ctx, cancel := tt.ctx()
			defer cancel()
			ans, err := c.Start(ctx, &chat.Turn{Messages: user("hi")})
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			if a := collect(t, ans); !errors.Is(a.err, tt.want) {
				t.Errorf("silent turn: %v, want %v", a.err, tt.want)
			}
			waitStop(t, f)
		})
	}
}

func TestAskRefused(t *testing.T) {
	tests := []struct {
		give    any // the result of chat/ask, or an *lingmarpc.Error
		wantIs  error
		wantMsg string
	}{
		{give: &lingmarpc.Error{Code: -32001, Message: "not logged in"}, wantIs: chat.ErrNotLoggedIn},
		// The reply's shape on the wire: the message is errorMessage.
		{give: map[string]any{"success": false, "errorCode": "", "errorMessage": "No cached user info, please login."},
			wantIs: chat.ErrNotLoggedIn},
		{give: map[string]any{"success": false, "errorMsg": "User not login"}, wantIs: chat.ErrNotLoggedIn},
		{give: map[string]any{"success": false, "errorCode": "E1", "errorMessage": "model busy"}, wantMsg: "model busy"},
		{give: &lingmarpc.Error{Code: -32000, Message: "boom"}, wantMsg: "boom"},
	}
	for _, tt := range tests {
		f := newFake(t, func(fc *fakeConn, m *lingmarpc.Message) {
			if e, ok := tt.give.(*lingmarpc.Error); ok {
				fc.write(fc.frame(&lingmarpc.Message{ID: m.ID, Error: e}))
				return
			}
			fc.reply(m.ID, tt.give)
		})
		c := fakeClient(t, f, Config{})
		_, err := c.Start(context.Background(), &chat.Turn{Messages: user("hi")})
		if err == nil || tt.wantIs != nil && !errors.Is(err, tt.wantIs) || !strings.Contains(err.Error(), tt.wantMsg) ||
			tt.wantIs == nil && errors.Is(err, chat.ErrNotLoggedIn) {
			t.Errorf("Start() refused with %v = %v, want an error matching %v with %q", tt.give, err, tt.wantIs, tt.wantMsg)
		}
	}
}

// isUpstream returns a check for an UpstreamError with the status.
func isUpstream(status int) func(error) bool {
	return func(err error) bool {
		var ue *chat.UpstreamError
		return errors.As(err, &ue) && ue.Status == status
	}
}

// isRateLimited returns a check for a RateLimitedError with the hint.
func isRateLimited(retry time.Duration) func(error) bool {
	return func(err error) bool {
		var rl *chat.RateLimitedError
		return errors.As(err, &rl) && rl.RetryAfter == retry
	}
}

func isNil(err error) bool { return err == nil }

func TestFinishError(t *testing.T) {
	timeout := func(err error) bool { return errors.Is(err, context.DeadlineExceeded) && !isUpstream(408)(err) }
	withText := func(want string, is func(error) bool) func(error) bool {
		return func(err error) bool { return is(err) && strings.Contains(err.Error(), want) }
	}
	tests := []struct {
		give chatParams
		want func(error) bool
	}{
		{give: chatParams{StatusCode: 200, Reason: "success"}, want: isNil},
		{give: chatParams{}, want: isNil},
		// The plugin's status codes: 408 is a timeout, 500 a server error.
		{give: chatParams{StatusCode: 408, Reason: "error"}, want: timeout},
		{give: chatParams{StatusCode: 500, Reason: "error", ErrorMessage: "model overloaded"},
			want: withText("model overloaded", isUpstream(500))},
		{give: chatParams{StatusCode: 500, Reason: "error", ErrorMsg: "old name"}, want: withText("old name", isUpstream(500))},
		{give: chatParams{StatusCode: 200, Reason: "cancelled"}, want: isUpstream(200)},
		{give: chatParams{StatusCode: 429, ErrorMsg: "rate limited", RetryAfter: "3"}, want: isRateLimited(3 * time.Second)},
		{give: chatParams{StatusCode: 500, ErrorMessage: "Daily quota exceeded"}, want: isRateLimited(0)},
		{give: chatParams{StatusCode: 500, ErrorMessage: "rate limited", RetryAfter: "600"}, want: isRateLimited(10 * time.Minute)},
		{give: chatParams{StatusCode: 404, ErrorMsg: "session not found"}, want: isUpstream(404)},
		{give: chatParams{StatusCode: 418, Reason: "error"}, want: isUpstream(418)},
		{give: chatParams{Reason: "error", ErrorMsg: "x"}, want: isUpstream(0)},
		{give: chatParams{StatusCode: 401, ErrorMsg: "token expired"}, want: func(err error) bool {
			return errors.Is(err, chat.ErrNotLoggedIn) && isUpstream(401)(err)
		}},
		{give: chatParams{StatusCode: 500, ErrorMessage: "No cached user info, please login."}, want: func(err error) bool {
			return errors.Is(err, chat.ErrNotLoggedIn)
		}},
	}
	cfg := Config{}
	cfg.setDefaults()
	for _, tt := range tests {
		if err := finishError(&tt.give, &cfg); !tt.want(err) {
			t.Errorf("finishError(%+v) = %v, not as wanted", tt.give, err)
		}
	}
	// The texts are the operator's to replace.
	cfg.RateLimitText = regexp.MustCompile(`busy`)
	if err := finishError(&chatParams{StatusCode: 500, ErrorMessage: "server busy"}, &cfg); !isRateLimited(0)(err) {
		t.Errorf("a configured rate-limit text: %v, want a rate limit", err)
	}
}

// A turn's answer is read event by event on the reader's goroutine, ends
// with its closing event (Next then returns false), and a finished turn
// needs no chat/stop.
func TestPulledTurn(t *testing.T) {
	f := newFake(t, askThen(func(fc *fakeConn, reqID string) {
		fc.notify(``, "chat/answer", map[string]string{"requestId": reqID, "text": "hel"})
		fc.notify(``, "chat/answer", map[string]string{"requestId": reqID, "text": "lo"})
		fc.notify(``, "chat/finish", map[string]any{"requestId": reqID, "sessionId": "s-1", "statusCode": 200})
	}))
	c := fakeClient(t, f, Config{})
	a, err := c.Start(context.Background(), &chat.Turn{Messages: user("hi")})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	var text strings.Builder
	var done chat.Event
	for done.Type == 0 {
		ev, ok := a.Next()
		if !ok {
			t.Fatalf("Next = false before the closing event")
		}
		switch ev.Type {
		case chat.EventText:
			text.WriteString(ev.Text)
		case chat.EventDone:
			done = ev
		case chat.EventError:
			t.Fatalf("answer: %v", ev.Err)
		}
	}
	if ev, ok := a.Next(); ok {
		t.Errorf("Next past the end = %+v, true; want false", ev)
	}
	a.Close()
	a.Close()
	if text.String() != "hello" || done.SessionID != "s-1" || done.Finish != chat.FinishStop {
		t.Errorf("answer = %q, %+v; want hello, stopped, in s-1", text.String(), done)
	}
	if methods, _ := f.seen(); slices.Contains(methods, "chat/stop") {
		t.Errorf("a finished turn sent chat/stop (%v)", methods)
	}
}

// A pulled turn given up before its end is stopped on the worker.
func TestPulledTurnClosedEarly(t *testing.T) {
	f := newFake(t, askThen(func(fc *fakeConn, reqID string) {
		fc.notify(``, "chat/answer", map[string]string{"requestId": reqID, "text": "par"})
	}))
	c := fakeClient(t, f, Config{})
	a, err := c.Start(context.Background(), &chat.Turn{Messages: user("hi")})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if ev, ok := a.Next(); !ok || ev.Type != chat.EventText || ev.Text != "par" {
		t.Fatalf("first event = %+v, %v; want the text", ev, ok)
	}
	a.Close()
	if n := openTurns(c); n != 0 {
		t.Errorf("%d turns still registered after Close", n)
	}
	waitStop(t, f)
}

// A worker that stops reading: a write blocks once the socket's buffers are
// full, and the timeout ends it, closing the connection (as a context's
// deadline would), and with it every call.
func TestWriteTimeout(t *testing.T) {
	stalled := make(chan struct{})
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	f := newFake(t, func(fc *fakeConn, m *lingmarpc.Message) {
		if m.Method == "auth/status" {
			close(stalled)
			<-release // the worker reads nothing more
		}
	})
	c := fakeClient(t, f, Config{CallTimeout: time.Minute})
	go func() { _, _ = c.Status(context.Background()) }()
	<-stalled
	big := make([]byte, 64<<20) // more than loopback's socket buffers hold
	start := time.Now()
	err := c.write(big, 300*time.Millisecond)
	if took := time.Since(start); !errors.Is(err, chat.ErrWorkerGone) || took < 300*time.Millisecond || took > 10*time.Second {
		t.Fatalf("write to a stalled worker: %v after %s, want ErrWorkerGone after the 300ms timeout", err, took)
	}
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the connection stayed open after the write timed out")
	}
	if _, err := c.Status(context.Background()); !errors.Is(err, chat.ErrWorkerGone) {
		t.Errorf("a call after the timeout: %v, want ErrWorkerGone", err)
	}
}
