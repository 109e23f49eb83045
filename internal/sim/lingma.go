package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/poolgate/poolgate/internal/lingmarpc"
)

// version is what initialize reports.
const version = "0.1.0-sim"

// JSON-RPC error codes the simulator returns.
const (
	codeInvalidParams  = -32602
	codeMethodNotFound = -32601
)

// errNoReply means the client did not answer a server-to-client request in time.
var errNoReply = errors.New("no response from client")

// conn is one WebSocket client. Its read loop is the only reader; turns run
// in their own goroutines, which the conn owns and waits for.
type conn struct {
	s   *Sim
	ws  *websocket.Conn
	log *slog.Logger
	ctx context.Context // ends when the connection or the process ends

	wmu sync.Mutex // one frame at a time on the socket

	mu      sync.Mutex
	nextID  int64
	pending map[string]chan *lingmarpc.Message // our request id -> its reply
	invokes map[string]chan *invokeResponse    // toolCallId -> the turn waiting for its tool/invokeResult

	// replay plays a transcript instead of answering (--replay); nil
	// otherwise.
	replay *replayer

	turns sync.WaitGroup
}

func (s *Sim) serveWS(w http.ResponseWriter, r *http.Request) {
	// Add before the hijack: until then Shutdown tracks the connection, so Run
	// cannot be in conns.Wait yet.
	s.conns.Add(1)
	defer s.conns.Done()
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		s.log.Warn("websocket accept", "err", err)
		return
	}
	ws.SetReadLimit(lingmarpc.MaxFrame + 64<<10)
	ctx, cancel := context.WithCancel(r.Context())
	c := &conn{s: s, ws: ws, log: s.log.With("remote", r.RemoteAddr), ctx: ctx, pending: map[string]chan *lingmarpc.Message{},
		invokes: map[string]chan *invokeResponse{}}
	if s.script != nil {
		c.replay = newReplayer(c, s.script)
		s.replaying.Store(c.replay)
	}
	c.readLoop()
	cancel()
	c.turns.Wait()
	_ = ws.CloseNow()
}

// readLoop buffers WebSocket messages, splits them into frames and handles
// each, until the connection or the process ends.
func (c *conn) readLoop() {
	var buf []byte
	for {
		_, data, err := c.ws.Read(c.ctx)
		if err != nil {
			c.log.Debug("websocket closed", "err", err)
			return
		}
		buf = append(buf, data...)
		if len(bytes.TrimSpace(buf)) > 0 && bytes.TrimSpace(buf)[0] == '{' {
			if !c.bareJSON(buf) {
				// The real worker's words.
				c.log.Error("Unknown message header: rejecting bare JSON without a Content-Length frame", "bytes", len(buf))
			}
			buf = buf[:0]
			continue
		}
		for {
			body, rest, err := lingmarpc.Split(buf)
			if errors.Is(err, lingmarpc.ErrIncomplete) {
				buf = rest
				break
			}
			if err != nil {
				c.log.Error("bad frame, dropping buffer", "err", err)
				buf = buf[:0]
				break
			}
			buf = rest
			m, err := lingmarpc.Decode(body)
			if err != nil {
				c.log.Error("bad message", "err", err)
				continue
			}
			if c.replay != nil {
				c.replay.handle(m, body)
				continue
			}
			c.handle(m)
		}
		if len(buf) == 0 {
			buf = nil // let a large message's buffer go
		}
	}
}

func (c *conn) handle(m *lingmarpc.Message) {
	switch {
	case m.IsResponse():
		c.mu.Lock()
		ch := c.pending[string(m.ID)]
		delete(c.pending, string(m.ID))
		c.mu.Unlock()
		if ch == nil {
			c.log.Warn("reply to no pending request", "id", string(m.ID))
			return
		}
		ch <- m
	case m.IsRequest():
		c.dispatch(m)
	default:
		// The real worker logs a notification it has no handler for (the
		// client's initialized) and answers nothing.
		c.log.Warn("notification ignored: unknown method: "+m.Method, "method", m.Method)
	}
}

// dispatch answers one client request. It must not block: replies to our own
// requests arrive on the same read loop.
func (c *conn) dispatch(m *lingmarpc.Message) {
	var (
		result any
		rpcErr *lingmarpc.Error
	)
	switch m.Method {
	case "initialize":
		caps := map[string]any{}
		if c.s.cfg.NativeTools {
			caps["toolInvoke"] = true
		}
		result = map[string]any{"capabilities": caps, "serverInfo": map[string]any{"name": "simworker", "version": version}}
	case "auth/status":
		result = c.s.authStatus()
	case "login/generateUrl":
		result = c.s.generateLoginURL()
	case "config/queryModels":
		ms := c.s.models()
		result = map[string]any{"chat": ms, "assistant": ms}
	case "config/getEndpoint":
		result = map[string]any{"endpoint": c.s.endpoint()}
	case "config/updateEndpoint":
		var p struct {
			Endpoint string `json:"endpoint"`
		}
		_ = json.Unmarshal(m.Params, &p) // no endpoint is refused below
		if err := c.s.setEndpoint(p.Endpoint); err != nil {
			result = c.s.failure("INVALID_ENDPOINT", err.Error())
		} else {
			result = map[string]any{"success": true}
		}
	case "chat/ask":
		c.ask(m)
		return
	case "tool/invokeResult":
		c.invokeResult(m)
		return
	case "chat/stop":
		var p struct {
			RequestID string `json:"requestId"`
		}
		_ = json.Unmarshal(m.Params, &p) // an unreadable stop stops nothing
		c.s.stopTurn(p.RequestID)
		result = map[string]any{"success": true}
	case "chat/deleteSessionById":
		var p struct {
			SessionID string `json:"sessionId"`
		}
		_ = json.Unmarshal(m.Params, &p)
		c.s.deleteSession(p.SessionID)
		result = map[string]any{"success": true}
	default:
		rpcErr = &lingmarpc.Error{Code: codeMethodNotFound, Message: "unknown method: " + m.Method}
	}
	c.respond(m.ID, result, rpcErr)
}

// accepted is the reply of a request the worker took on: {success,
// errorCode, errorMessage} with empty error fields, as chat/ask is answered
// on the wire.
func (s *Sim) accepted() map[string]any {
	return map[string]any{"success": true, "errorCode": "", s.errKey(): ""}
}

// failure is the reply of a request the worker refuses.
func (s *Sim) failure(code, msg string) map[string]any {
	return map[string]any{"success": false, "errorCode": code, s.errKey(): msg}
}

func (s *Sim) authStatus() map[string]any {
	u, id, ok := s.creds.status()
	if !ok {
		return map[string]any{"status": 1}
	}
	return map[string]any{"status": 2, "id": id, "name": u.Username, "accountId": u.Username, "userType": "personal"}
}

// respond sends the response to request id.
func (c *conn) respond(id json.RawMessage, result any, rpcErr *lingmarpc.Error) {
	m := &lingmarpc.Message{ID: id, Error: rpcErr}
	if rpcErr == nil {
		raw, err := json.Marshal(result)
		if err != nil {
			c.log.Error("encode result", "err", err)
			raw = []byte("null")
		}
		m.Result = raw
	}
	if err := c.send(m); err != nil {
		c.log.Debug("respond", "err", err)
	}
}

func (c *conn) send(m *lingmarpc.Message) error {
	frame, err := lingmarpc.Encode(m)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.ws.Write(c.ctx, websocket.MessageText, frame)
}

// call sends a server-to-client request and waits for its reply, at most
// ReplyTimeout. It fails early when ctx ends.
func (c *conn) call(ctx context.Context, method string, params any) error {
	_, err := c.callResult(ctx, method, params)
	return err
}

// callResult is call that returns the client's reply.
func (c *conn) callResult(ctx context.Context, method string, params any) (*lingmarpc.Message, error) {
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", method, err)
	}
	ch := make(chan *lingmarpc.Message, 1)
	c.mu.Lock()
	c.nextID++
	id := json.RawMessage(strconv.FormatInt(c.nextID, 10))
	c.pending[string(id)] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, string(id))
		c.mu.Unlock()
	}()
	if err := c.send(&lingmarpc.Message{ID: id, Method: method, Params: raw}); err != nil {
		return nil, fmt.Errorf("send %s: %w", method, err)
	}
	return awaitReply(ctx, ch, c.s.cfg.ReplyTimeout, method)
}

// awaitReply waits for what the client sends on ch, at most timeout (then
// errNoReply, with what); it fails early when ctx ends.
func awaitReply[T any](ctx context.Context, ch <-chan T, timeout time.Duration, what string) (T, error) {
	var none T
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case v := <-ch:
		return v, nil
	case <-t.C:
		return none, fmt.Errorf("%s: %w", what, errNoReply)
	case <-ctx.Done():
		return none, context.Cause(ctx)
	}
}
