package lingma

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/lingmarpc"
	"github.com/poolgate/poolgate/pool/worker"
)

// Client is a connection to one running Lingma worker. Its one reader
// goroutine routes responses to pending calls and chat messages to their
// turns, and answers every request the worker sends. All methods are safe
// for concurrent use.
type Client struct {
	conn *websocket.Conn
	cfg  Config
	name string
	done chan struct{} // closed when the reader has ended

	// wmu serialises writes so that one timer, watchdog, bounds each: a
	// write that outlasts its timeout closes the connection, as an expired
	// context does in coder/websocket, without a context and a timer made
	// for every frame (the worker's every piece of an answer is a request
	// the reader replies to).
	wmu      sync.Mutex
	watchdog *time.Timer
	// replyBuf is the reader's own, for the replies it writes.
	replyBuf []byte

	nextID  atomic.Int64 // JSON-RPC ids of our requests
	turnSeq atomic.Int64 // suffixes of chat requestIds
	// native: offered tools go to the worker as data and come back as
	// tool/invoke requests (Config.ToolMode, decided at initialize).
	native bool
	// rec writes the turns' transcripts; nil when recording is off.
	rec *recorder

	mu      sync.Mutex
	pending map[int64]chan *lingmarpc.Message
	turns   map[string]*turn
	err     error // why the connection ended; set before done is closed

	closeOnce sync.Once
}

var _ worker.Backend = (*Client)(nil)

// Capabilities: a Lingma worker has them all.
func (c *Client) Capabilities() worker.Capabilities {
	return worker.Capabilities{Models: true, RawModels: true, BrowserLogin: true, Sessions: true}
}

func newClient(conn *websocket.Conn, cfg Config, name string, rec *recorder) *Client {
	conn.SetReadLimit(readLimit)
	c := &Client{
		conn:     conn,
		cfg:      cfg,
		name:     name,
		rec:      rec,
		done:     make(chan struct{}),
		pending:  map[int64]chan *lingmarpc.Message{},
		turns:    map[string]*turn{},
		watchdog: time.AfterFunc(time.Hour, func() { _ = conn.CloseNow() }),
	}
	c.watchdog.Stop()
	go c.read()
	return c
}

// Close drops the connection and waits for the reader to end. Pending calls
// and running turns fail with chat.ErrWorkerGone. It is safe to call twice.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		// The reader ends with the connection.
		_ = c.conn.CloseNow() // the worker may be dead: no close handshake
	})
	<-c.done
	if c.rec != nil {
		c.rec.close()
	}
	return nil
}

// Status asks auth/status. Logged in means status 2 and a non-empty id.
func (c *Client) Status(ctx context.Context) (worker.AuthState, error) {
	var r struct {
		Status    flexInt    `json:"status"`
		ID        flexString `json:"id"`
		Name      flexString `json:"name"`
		AccountID flexString `json:"accountId"`
	}
	if err := c.call(ctx, "auth/status", struct{}{}, &r); err != nil {
		return worker.AuthState{}, err
	}
	if r.Status != 2 || r.ID == "" {
		return worker.AuthState{}, nil
	}
	acct := cmp.Or(string(r.Name), string(r.AccountID), string(r.ID))
	return worker.AuthState{LoggedIn: true, Account: acct}, nil
}

// Models asks config/queryModels and flattens its scenes into one list,
// without duplicates, scenes in name order.
func (c *Client) Models(ctx context.Context) ([]chat.Model, error) {
	_, ms, err := c.RawModels(ctx)
	return ms, err
}

// RawModels is Models with config/queryModels' own answer beside the list.
func (c *Client) RawModels(ctx context.Context) (json.RawMessage, []chat.Model, error) {
	var raw json.RawMessage
	if err := c.call(ctx, "config/queryModels", struct{}{}, &raw); err != nil {
		return nil, nil, err
	}
	ms, err := c.parseModels(raw)
	if err != nil {
		return raw, nil, err
	}
	return raw, ms, nil
}

func (c *Client) parseModels(raw json.RawMessage) ([]chat.Model, error) {
	type entry struct {
		Key         string `json:"key"`
		DisplayName string `json:"displayName"`
	}
	var lists [][]entry
	if trimmed := bytes.TrimSpace(raw); len(trimmed) > 0 && trimmed[0] == '[' {
		var l []entry
		if err := json.Unmarshal(trimmed, &l); err != nil {
			return nil, fmt.Errorf("lingma %s: config/queryModels: %w", c.name, err)
		}
		lists = append(lists, l)
	} else {
		var scenes map[string][]entry
		if err := json.Unmarshal(raw, &scenes); err != nil {
			return nil, fmt.Errorf("lingma %s: config/queryModels: %w", c.name, err)
		}
		for _, k := range slices.Sorted(maps.Keys(scenes)) {
			lists = append(lists, scenes[k])
		}
	}
	var out []chat.Model
	seen := map[string]bool{}
	for _, l := range lists {
		for _, e := range l {
			if e.Key == "" || seen[e.Key] {
				continue
			}
			seen[e.Key] = true
			out = append(out, chat.Model{ID: e.Key, Name: cmp.Or(e.DisplayName, e.Key)})
		}
	}
	return out, nil
}

// LoginURL asks login/generateUrl for the URL a browser signs in at. With a
// DedicatedDomain, the worker's endpoint is switched to it first.
func (c *Client) LoginURL(ctx context.Context) (string, error) {
	if c.cfg.DedicatedDomain != "" {
		if err := c.useEndpoint(ctx, c.cfg.DedicatedDomain); err != nil {
			return "", err
		}
	}
	var r struct {
		LoginURL string `json:"loginUrl"`
		result
	}
	if err := c.call(ctx, "login/generateUrl", map[string]string{"loginDedicatedType": ""}, &r); err != nil {
		return "", err
	}
	if r.LoginURL == "" {
		return "", fmt.Errorf("lingma %s: login/generateUrl gave no URL: %s", c.name, r.reason("no reason"))
	}
	return r.LoginURL, nil
}

// useEndpoint reads the worker's endpoint and switches it to want when it
// differs. A switch the worker refuses fails the login: signing an
// enterprise account in at the public endpoint cannot succeed.
func (c *Client) useEndpoint(ctx context.Context, want string) error {
	var cur struct {
		Endpoint string `json:"endpoint"`
	}
	if err := c.call(ctx, "config/getEndpoint", struct{}{}, &cur); err != nil {
		return err
	}
	if strings.TrimRight(cur.Endpoint, "/") == strings.TrimRight(want, "/") {
		return nil
	}
	return c.act(ctx, "config/updateEndpoint", map[string]string{"endpoint": want}, "switch endpoint to "+want)
}

// DeleteSession frees an upstream session with chat/deleteSessionById.
func (c *Client) DeleteSession(ctx context.Context, sessionID string) error {
	return c.act(ctx, "chat/deleteSessionById", map[string]string{"sessionId": sessionID}, "delete session "+sessionID)
}

// act calls method, whose answer is a result, and fails with what it was
// doing when the answer says success: false.
func (c *Client) act(ctx context.Context, method string, params any, doing string) error {
	var r result
	if err := c.call(ctx, method, params, &r); err != nil {
		return err
	}
	if r.failed() {
		return fmt.Errorf("lingma %s: %s: %s", c.name, doing, r.message())
	}
	return nil
}

// result is the {success, errorCode, errorMessage} shape of several
// answers (seen on the wire for chat/ask); errorMsg is the name earlier
// notes gave the message, still read.
type result struct {
	Success      *bool      `json:"success"`
	ErrorCode    flexString `json:"errorCode"`
	ErrorMessage string     `json:"errorMessage"`
	ErrorMsg     string     `json:"errorMsg"`
}

// failed reports an explicit success:false; an absent field is success.
func (r *result) failed() bool { return r.Success != nil && !*r.Success }

func (r *result) message() string { return r.reason("success: false") }

// reason is the answer's error text, else its code, else none.
func (r *result) reason(none string) string {
	return cmp.Or(r.ErrorMessage, r.ErrorMsg, string(r.ErrorCode), none)
}

// call sends one request and waits for its response, at most CallTimeout.
func (c *Client) call(ctx context.Context, method string, params, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	ch := make(chan *lingmarpc.Message, 1)
	id := c.nextID.Add(1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		// The connection ended before this call: it cannot be the cause.
		return fmt.Errorf("lingma %s: %s: %w: %w", c.name, method, chat.ErrNotSent, err)
	}
	c.pending[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}()
	if err := c.send(id, method, params); err != nil {
		return fmt.Errorf("lingma %s: %s: %w", c.name, method, err)
	}
	select {
	case m := <-ch:
		if m.Error != nil {
			return fmt.Errorf("lingma %s: %s: %w", c.name, method, m.Error)
		}
		if out == nil || len(m.Result) == 0 {
			return nil
		}
		if err := json.Unmarshal(m.Result, out); err != nil {
			return fmt.Errorf("lingma %s: %s: decode result: %w", c.name, method, err)
		}
		return nil
	case <-c.done:
		return fmt.Errorf("lingma %s: %s: %w", c.name, method, c.gone())
	case <-ctx.Done():
		return fmt.Errorf("lingma %s: %s: %w", c.name, method, ctx.Err())
	}
}

// write sends one frame. It never uses a caller's context: cancelling a
// write in flight closes the whole WebSocket (coder/websocket), which would
// take every other turn down with it.
func (c *Client) write(frame []byte, timeout time.Duration) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.rec != nil {
		c.rec.out(frame)
	}
	c.watchdog.Reset(timeout)
	err := c.conn.Write(context.Background(), websocket.MessageText, frame)
	if !c.watchdog.Stop() && err == nil {
		err = errWriteTimeout // it fired as the write ended: the connection is closed
	}
	if err != nil {
		return fmt.Errorf("%w: %w", chat.ErrWorkerGone, err)
	}
	return nil
}

var errWriteTimeout = errors.New("write to the worker timed out")

// gone is the error of a connection that has ended.
func (c *Client) gone() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// read is the connection's one reader. It ends when the connection does,
// failing every pending call and running turn.
func (c *Client) read() {
	var buf []byte
	var err error
	for {
		buf, err = c.readMessage(buf)
		if err != nil {
			break
		}
		rest := buf
		for {
			var body []byte
			body, rest, err = lingmarpc.Split(rest)
			if errors.Is(err, lingmarpc.ErrIncomplete) {
				err = nil
				break
			}
			if err != nil {
				break
			}
			m := new(lingmarpc.Message)
			if lingmarpc.Read(body, m) != nil {
				continue // one bad message does not end the connection
			}
			if c.rec != nil {
				c.rec.in(body)
			}
			c.dispatch(m)
		}
		if err != nil {
			break
		}
		// Keep a partial frame at the front; let a large buffer go.
		buf = buf[:copy(buf, rest)]
		if len(buf) == 0 && cap(buf) > 1<<20 {
			buf = nil
		}
	}
	c.mu.Lock()
	c.err = fmt.Errorf("%w: %v", chat.ErrWorkerGone, err)
	c.mu.Unlock()
	close(c.done)
}

// readMessage appends one WebSocket message to buf.
//
// Its context never ends (Close closes the connection instead): one that
// could costs every read coder/websocket's timeout set-up.
func (c *Client) readMessage(buf []byte) ([]byte, error) {
	_, r, err := c.conn.Reader(context.Background())
	if err != nil {
		return buf, err
	}
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, 4096)
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// dispatch handles one incoming message on the reader goroutine. It never
// blocks on a consumer: responses go to 1-buffered channels and chat
// messages to their turn's unbounded queue.
func (c *Client) dispatch(m *lingmarpc.Message) {
	if m.IsResponse() {
		id, err := strconv.ParseInt(strings.Trim(string(m.ID), `"`), 10, 64)
		if err != nil {
			return
		}
		// The caller reads the response after the reader moved on: it
		// gets its own copy of what pointed into the read buffer.
		m.ID, m.Result = bytes.Clone(m.ID), bytes.Clone(m.Result)
		c.mu.Lock()
		ch := c.pending[id]
		delete(c.pending, id)
		c.mu.Unlock()
		if ch != nil {
			ch <- m
		}
		return
	}
	if m.Method == "tool/invoke" {
		c.invoke(m)
		return
	}
	if len(m.ID) > 0 {
		// The worker stalls until every request it sends is answered.
		_ = c.reply(m.ID) // a failed write ends the reader too
	}
	switch m.Method {
	case "chat/answer", "chat/think", "chat/finish":
	default:
		return
	}
	var p chatParams
	if readChatParams(m.Params, &p) != nil || p.RequestID == "" {
		return
	}
	c.mu.Lock()
	t := c.turns[p.RequestID]
	c.mu.Unlock()
	if t != nil {
		p.method = m.Method
		t.Push(&p)
	}
}

// resultFrame is the framed response to request id with result v.
func resultFrame(id json.RawMessage, v any) []byte {
	const room = frameRoom
	body, _ := json.Marshal(v) // only the driver's own structs reach here
	b := make([]byte, room, room+len(id)+len(body)+40)
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, id...)
	b = append(b, `,"result":`...)
	b = append(b, body...)
	b = append(b, '}')
	return withHeader(b, room)
}

// requestFrame encodes a framed request. It writes the JSON body once into a
// buffer that reserves room for the header in front, and does not escape
// HTML characters (prompts are full of "<<<"). A large chat/ask is framed
// by newAskMessage (send).
func requestFrame(id int64, method string, params any) ([]byte, error) {
	b, err := requestJSON(id, method, params)
	if err != nil {
		return nil, err
	}
	return withHeader(b, frameRoom), nil
}

// requestJSON encodes a request's JSON after frameRoom bytes of room.
func requestJSON(id int64, method string, params any) ([]byte, error) {
	buf := bytes.NewBuffer(make([]byte, frameRoom, 256))
	buf.WriteString(`{"jsonrpc":"2.0","id":`)
	buf.WriteString(strconv.FormatInt(id, 10))
	buf.WriteString(`,"method":`)
	buf.WriteString(strconv.Quote(method)) // method names are ASCII
	buf.WriteString(`,"params":`)
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(params); err != nil {
		return nil, fmt.Errorf("encode %s: %w", method, err)
	}
	buf.Truncate(buf.Len() - 1) // Encode's newline
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// reply answers the worker's request id with an empty result. Only the
// reader calls it, once for each piece of an answer, so every reply is
// built in the same buffer (a write is done with its frame when it returns).
func (c *Client) reply(id json.RawMessage) error {
	b := append(c.replyBuf[:0], make([]byte, frameRoom)...)
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, id...)
	b = append(b, `,"result":{}}`...)
	c.replyBuf = b
	return c.write(withHeader(b, frameRoom), c.cfg.CallTimeout)
}

// frameRoom is the space reserved in front of a body for its header:
// "Content-Length: " + up to 10 digits + "\r\n\r\n".
const frameRoom = 32

// withHeader writes the Content-Length header right before the body that
// starts at b[room:] and returns the framed message.
func withHeader(b []byte, room int) []byte {
	var hdr [frameRoom]byte
	h := append(hdr[:0], "Content-Length: "...)
	h = strconv.AppendInt(h, int64(len(b)-room), 10)
	h = append(h, "\r\n\r\n"...)
	start := room - len(h)
	copy(b[start:], h)
	return b[start:]
}

// flexInt decodes a number that some builds send as a string.
type flexInt int

// UnmarshalJSON accepts 2, 2.0, "2" and null.
func (f *flexInt) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "" || s == "null" {
		*f = 0
		return nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return fmt.Errorf("not a number: %s", b)
	}
	*f = flexInt(v)
	return nil
}

// flexString decodes a string that some builds send as a number.
type flexString string

// UnmarshalJSON accepts a string, a number or null.
func (f *flexString) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*f = flexString(s)
		return nil
	}
	if string(b) == "null" {
		*f = ""
		return nil
	}
	*f = flexString(b)
	return nil
}
