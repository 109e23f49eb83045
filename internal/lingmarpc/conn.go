package lingmarpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// Conn is a plain JSON-RPC connection to a Lingma worker's socket port,
// which shows what the worker sends as it is, not as the driver reads it:
// `poolgate doctor` checks a real worker over one, and the simulator's
// tests drive it over one. The worker's answers go to the request that
// asked; its requests and notifications come on In. It is safe for
// concurrent use.
type Conn struct {
	ws  *websocket.Conn
	cfg ConnConfig

	mu      sync.Mutex
	next    int64
	pending map[string]chan *Message
	// In are the worker's requests and notifications. When nobody reads
	// them, those past its buffer are dropped: a worker flooding the
	// connection is not waited for.
	In   chan *Message
	done chan struct{}
}

// ConnConfig says what a Conn tells of what it sees (nil: nothing).
type ConnConfig struct {
	// Tap is told of every message written (Send) and read (Recv), with
	// its body.
	Tap func(dir string, body []byte, m *Message)
	// Bad is told of a frame whose body is no JSON-RPC message.
	Bad func(body []byte, err error)
}

// ErrGone is a call's error when the worker closed the connection.
var ErrGone = errors.New("the worker closed the connection")

// Dial connects to the worker's socket port on loopback.
func Dial(ctx context.Context, port int, cfg ConnConfig) (*Conn, error) {
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(dctx, "ws://127.0.0.1:"+strconv.Itoa(port), nil)
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(MaxFrame + 64<<10)
	c := &Conn{ws: ws, cfg: cfg, pending: map[string]chan *Message{}, In: make(chan *Message, 4096), done: make(chan struct{})}
	go c.read()
	return c, nil
}

// Close closes the connection and waits for its reader.
func (c *Conn) Close() {
	_ = c.ws.CloseNow()
	<-c.done
}

// Done is closed once the connection is.
func (c *Conn) Done() <-chan struct{} { return c.done }

func (c *Conn) read() {
	defer close(c.done)
	var buf []byte
	for {
		_, data, err := c.ws.Read(context.Background())
		if err != nil {
			return
		}
		buf = append(buf, data...)
		for {
			body, rest, err := Split(buf)
			if err != nil {
				break
			}
			buf = rest
			m, err := Decode(body)
			if err != nil {
				if c.cfg.Bad != nil {
					c.cfg.Bad(body, err)
				}
				continue
			}
			c.tap(Recv, body, m)
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
			case c.In <- m:
			default:
			}
		}
	}
}

func (c *Conn) tap(dir string, body []byte, m *Message) {
	if c.cfg.Tap != nil {
		c.cfg.Tap(dir, body, m)
	}
}

// Send frames and writes m.
func (c *Conn) Send(m *Message) error {
	frame, err := Encode(m)
	if err != nil {
		return err
	}
	body, _, _ := Split(frame)
	c.tap(Send, body, m)
	return c.Raw(frame)
}

// Raw writes b as it is, as one WebSocket message (a frame of its own
// making, or none), untapped.
func (c *Conn) Raw(b []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.ws.Write(ctx, websocket.MessageText, b)
}

// Frame frames a request without writing it, and returns where its answer
// comes, for a caller that writes the frame itself (Raw), in pieces or
// with others.
func (c *Conn) Frame(method string, params any) ([]byte, <-chan *Message, error) {
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, nil, err
	}
	ch := make(chan *Message, 1)
	c.mu.Lock()
	c.next++
	id := json.RawMessage(strconv.FormatInt(c.next, 10))
	c.pending[string(id)] = ch
	c.mu.Unlock()
	m := &Message{ID: id, Method: method, Params: raw}
	frame, err := Encode(m)
	if err == nil {
		body, _, _ := Split(frame)
		c.tap(Send, body, m)
	}
	return frame, ch, err
}

// Request sends a request and returns where its answer comes.
func (c *Conn) Request(method string, params any) (<-chan *Message, error) {
	frame, ch, err := c.Frame(method, params)
	if err != nil {
		return nil, err
	}
	return ch, c.Raw(frame)
}

// Call sends a request and waits for its answer within d.
func (c *Conn) Call(ctx context.Context, d time.Duration, method string, params any) (*Message, error) {
	ch, err := c.Request(method, params)
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
		return nil, fmt.Errorf("%s: %w", method, ErrGone)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Reply answers the worker's request id with result.
func (c *Conn) Reply(id json.RawMessage, result any) error {
	raw, err := json.Marshal(result)
	if err != nil {
		return err
	}
	return c.Send(&Message{ID: id, Result: raw})
}
