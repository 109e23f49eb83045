package doctor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/poolgate/poolgate/internal/lingmarpc"
)

// conn is the doctor's own connection to the worker: plain JSON-RPC, so
// that what the worker sends is seen as it is, not as the driver reads it.
// Every message is written to the run's transcript.
type conn struct {
	ws   *websocket.Conn
	tape *tape

	mu      sync.Mutex
	next    int64
	pending map[string]chan *lingmarpc.Message
	in      chan *lingmarpc.Message // the worker's requests and notifications
	done    chan struct{}
	err     error
}

// dial connects to the worker's socket port, once.
func dial(ctx context.Context, port int, tp *tape) (*conn, error) {
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(dctx, "ws://127.0.0.1:"+strconv.Itoa(port), nil)
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(lingmarpc.MaxFrame + 64<<10)
	c := &conn{ws: ws, tape: tp, pending: map[string]chan *lingmarpc.Message{},
		in: make(chan *lingmarpc.Message, 4096), done: make(chan struct{})}
	go c.read()
	return c, nil
}

func (c *conn) close() {
	_ = c.ws.CloseNow()
	<-c.done
}

func (c *conn) read() {
	defer close(c.done)
	var buf []byte
	for {
		_, data, err := c.ws.Read(context.Background())
		if err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
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
				continue
			}
			c.tape.record(lingmarpc.Recv, body, m)
			if m.IsResponse() {
				c.mu.Lock()
				ch := c.pending[string(m.ID)]
				delete(c.pending, string(m.ID))
				c.mu.Unlock()
				if ch != nil {
					ch <- m
				}
				continue
			}
			select {
			case c.in <- m:
			default: // a worker flooding the doctor: the checks see less
			}
		}
	}
}

// send frames and writes m.
func (c *conn) send(m *lingmarpc.Message) error {
	frame, err := lingmarpc.Encode(m)
	if err != nil {
		return err
	}
	body, _, _ := lingmarpc.Split(frame)
	c.tape.record(lingmarpc.Send, body, m)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.ws.Write(ctx, websocket.MessageText, frame)
}

// raw writes b as it is (the bare-JSON check), unrecorded.
func (c *conn) raw(b []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.ws.Write(ctx, websocket.MessageText, b)
}

// request sends a request and returns its id and where its answer comes.
func (c *conn) request(method string, params any) (json.RawMessage, chan *lingmarpc.Message, error) {
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, nil, err
	}
	ch := make(chan *lingmarpc.Message, 1)
	c.mu.Lock()
	c.next++
	id := json.RawMessage(strconv.FormatInt(c.next, 10))
	c.pending[string(id)] = ch
	c.mu.Unlock()
	return id, ch, c.send(&lingmarpc.Message{ID: id, Method: method, Params: raw})
}

var errGone = errors.New("the worker closed the connection")

// call sends a request and waits for its answer within d.
func (c *conn) call(ctx context.Context, d time.Duration, method string, params any) (*lingmarpc.Message, error) {
	_, ch, err := c.request(method, params)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case m := <-ch:
		return m, nil
	case <-t.C:
		return nil, fmt.Errorf("%s: no answer within %s", method, d)
	case <-c.done:
		return nil, fmt.Errorf("%s: %w", method, errGone)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// reply answers the worker's request id with result.
func (c *conn) reply(id json.RawMessage, result any) error {
	raw, err := json.Marshal(result)
	if err != nil {
		return err
	}
	return c.send(&lingmarpc.Message{ID: id, Result: raw})
}

// tape is the run's transcript: every message of every connection,
// redacted (prompts kept: the doctor's prompts are its own).
type tape struct {
	mu      sync.Mutex
	w       *lingmarpc.TranscriptWriter
	methods map[string]string // a request's direction and id -> its method
}

func (t *tape) record(dir string, body []byte, m *lingmarpc.Message) {
	if t == nil || t.w == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	method := m.Method
	switch {
	case m.Method != "" && len(m.ID) > 0:
		t.methods[dir+string(m.ID)] = m.Method
	case m.Method == "":
		other := lingmarpc.Recv
		if dir == lingmarpc.Recv {
			other = lingmarpc.Send
		}
		method = t.methods[other+string(m.ID)]
		delete(t.methods, other+string(m.ID))
	}
	_ = t.w.Write(dir, lingmarpc.Redact(body, method, true))
}
