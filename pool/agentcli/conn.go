package agentcli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool/worker"
)

// maxLine caps one line a CLI prints: a longer one breaks the process's
// connection (no answer of a coding agent comes near it).
const maxLine = 32 << 20

// conn is one running CLI process: its pipes, the goroutine that reads
// every line it prints, the control requests waiting for an answer and
// the turn its messages go to. The fields after b.mu's comment are the
// backend's, guarded by its lock.
type conn struct {
	b     *Backend
	label string
	in    io.WriteCloser
	out   io.ReadCloser
	child worker.Child // nil: the process the supervisor runs
	wmu   sync.Mutex   // one write at a time
	done  chan struct{}
	err   error // why reading ended; set before done is closed

	mu      sync.Mutex
	pending map[string]chan *Message
	sink    *sink // the running turn's queue, nil between turns

	// Guarded by b.mu.
	session string    // the session the process holds ("" : none yet)
	model   string    // the model it was last set to ("" : its default)
	busy    bool      // a turn (or a reset) runs on it
	used    time.Time // when its last turn ended
	stale   bool      // its session is not continued: reset it before a new conversation
	stuck   bool      // an interrupted turn did not end: take no turn
}

var requestSeq atomic.Int64

func (b *Backend) newConn(s worker.Stdio, child worker.Child, label string) *conn {
	c := &conn{b: b, label: label, in: s.In, out: s.Out, child: child, done: make(chan struct{}),
		pending: map[string]chan *Message{}}
	go c.read()
	return c
}

// close ends the process's input (a CLI exits at its end) and, for a
// spawned process, stops it; the reader then ends.
func (c *conn) close() {
	_ = c.in.Close()
	if c.child != nil {
		c.child.Stop()
	}
}

// alive reports whether the process's output is still being read.
func (c *conn) alive() bool {
	select {
	case <-c.done:
		return false
	default:
		return true
	}
}

// gone is the error of a turn whose process went away.
func (c *conn) gone() error {
	if c.err != nil && !errors.Is(c.err, io.EOF) && !errors.Is(c.err, os.ErrClosed) {
		return fmt.Errorf("%w: %v", chat.ErrWorkerGone, c.err)
	}
	return chat.ErrWorkerGone
}

// read reads every line the process prints until its output ends.
func (c *conn) read() {
	defer close(c.done)
	d := c.b.d
	r := bufio.NewReaderSize(c.out, 64<<10)
	for {
		line, err := readLine(r)
		if err != nil {
			c.err = err
			return
		}
		c.b.rec.write(c.label, "out", line)
		m, perr := Parse(line, d.cfg.Profile.Vocabulary)
		d.stats.count(perr)
		if perr != nil {
			d.cfg.Logger.Warn("agent CLI printed a line outside the protocol model", "kind", d.cfg.Profile.Name,
				"instance", c.b.name, "process", c.label, "err", perr)
			continue
		}
		c.dispatch(m)
	}
}

// readLine reads one line of at most maxLine bytes, without its newline.
func readLine(r *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		frag, err := r.ReadSlice('\n')
		if len(buf)+len(frag) > maxLine {
			return nil, fmt.Errorf("a line longer than %d bytes", maxLine)
		}
		switch {
		case err == nil:
			if buf == nil {
				return frag[:len(frag)-1], nil
			}
			return append(buf, frag[:len(frag)-1]...), nil
		case errors.Is(err, bufio.ErrBufferFull):
			buf = append(buf, frag...)
		default:
			return nil, err
		}
	}
}

// dispatch hands a message to whoever waits for it.
func (c *conn) dispatch(m *Message) {
	switch m.Type {
	case TypeControlResponse:
		if m.Response == nil {
			return
		}
		c.mu.Lock()
		ch := c.pending[m.Response.RequestID]
		delete(c.pending, m.Response.RequestID)
		c.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	case TypeControlRequest:
		// The CLI asks its host (a permission, a hook, a dialog): the
		// gateway runs none of these, so it says no at once rather than
		// leave the turn waiting.
		_ = c.write(map[string]any{"type": TypeControlResponse, "response": ControlResponse{Subtype: "error",
			RequestID: m.RequestID, Error: "poolgate answers no control requests"}})
	case TypeKeepAlive, TypeControlCancel:
	default:
		c.mu.Lock()
		s := c.sink
		c.mu.Unlock()
		if s != nil {
			s.Push(m)
		}
	}
}

// write sends one JSON line, within the call timeout when the pipe takes
// deadlines (a CLI that stopped reading its input must not block a turn).
func (c *conn) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if dl, ok := c.in.(interface{ SetWriteDeadline(time.Time) error }); ok {
		_ = dl.SetWriteDeadline(time.Now().Add(c.b.d.cfg.CallTimeout))
	}
	c.b.rec.write(c.label, "in", b[:len(b)-1])
	_, err = c.in.Write(b)
	return err
}

// ControlError is a control request the CLI answered with an error.
type ControlError struct {
	Subtype, Message string
}

func (e *ControlError) Error() string {
	return fmt.Sprintf("control request %s refused: %s", e.Subtype, e.Message)
}

// control sends a control request and waits for its answer.
func (c *conn) control(ctx context.Context, req ControlRequest) (json.RawMessage, error) {
	id := "pg-" + strconv.FormatInt(requestSeq.Add(1), 10)
	ch := make(chan *Message, 1)
	c.mu.Lock()
	c.pending[id] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}()
	if err := c.write(map[string]any{"type": TypeControlRequest, "request_id": id, "request": req}); err != nil {
		return nil, fmt.Errorf("control request %s: %w", req.Subtype, err)
	}
	select {
	case m := <-ch:
		if m.Response.Subtype != SubtypeSuccess {
			return nil, &ControlError{Subtype: req.Subtype, Message: m.Response.Error}
		}
		return m.Response.Response, nil
	case <-c.done:
		return nil, fmt.Errorf("control request %s: %w", req.Subtype, c.gone())
	case <-ctx.Done():
		return nil, fmt.Errorf("control request %s: %w", req.Subtype, ctx.Err())
	}
}

// initialize asks the CLI to initialize and returns its answer.
func (c *conn) initialize(ctx context.Context) (json.RawMessage, error) {
	return c.control(ctx, ControlRequest{Subtype: "initialize"})
}

// userLine is a user message as the CLI reads it on its standard input.
type userLine struct {
	Type            string  `json:"type"`
	Message         userMsg `json:"message"`
	ParentToolUseID *string `json:"parent_tool_use_id"`
}

type userMsg struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// send writes a user message.
func (c *conn) send(text string) error {
	return c.write(userLine{Type: TypeUser, Message: userMsg{Role: "user", Content: text}})
}

// listen makes s the queue of the process's messages (nil: none).
func (c *conn) listen(s *sink) {
	c.mu.Lock()
	c.sink = s
	c.mu.Unlock()
}

// sink is a turn's queue of the process's messages.
type sink = worker.Inbox[*Message]

func newSink() *sink { return worker.NewInbox[*Message]() }

// await waits for a result message on c (through s), for a reset or an
// interrupted turn's end; messages before it are dropped.
func (c *conn) await(ctx context.Context, s *sink) (*Message, error) {
	var q []*Message
	for {
		select {
		case <-s.Wake:
			q = s.Take(q)
			for _, m := range q {
				if m.Type == TypeResult {
					return m, nil
				}
			}
		case <-c.done:
			return nil, c.gone()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
