package lingma

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/jsonx"
)

// chat/ask carries the prompt, which may be megabytes, in questionText (and
// again in chatContext.text with lingma_chat_context prompt). encoding/json would escape it into a buffer of its
// own, grown by doubling, then copy that into the frame: some four times
// the frame in all, on top of the request it came from. So chat/ask's frame
// is built here: its envelope is encoded with the prompt left out, its size
// is known exactly before anything is written, and the prompt is escaped
// straight into its places: into one allocation of the frame's size, or,
// for a large frame, into the WebSocket a piece at a time (a fragmented
// message, which RFC 6455 requires every server to reassemble, as the
// simulator does), so the frame is never whole in memory.

// askFrameMin is the prompt size from which chat/ask's frame is built
// here; below it, encoding/json's copies cost nothing worth saving.
const askFrameMin = 4 << 10

// streamMin is the frame size from which a frame is streamed; smaller
// frames go out as one WebSocket message of one frame, as every other.
const streamMin = 1 << 20

// streamPiece is how much of the prompt is escaped at a time when streamed.
const streamPiece = 32 << 10

// promptHole stands for the prompt while chat/ask's envelope is encoded: a
// string no other field holds (a NUL reaches no other string of the
// envelope: ids are printable, model keys the pool's own).
const promptHole = "\x00poolgate-prompt\x00"

// askMessage is chat/ask's frame before it is written: the envelope's
// pieces between the prompt's places, and the prompt.
type askMessage struct {
	header []byte
	parts  [][]byte
	prompt string
	size   int // header included
}

// newAskMessage splits chat/ask's encoded envelope at the prompt's places;
// false when the envelope held the hole's text elsewhere.
func newAskMessage(id int64, p askParams) (*askMessage, bool, error) {
	m := &askMessage{prompt: p.QuestionText}
	holes := 1
	p.QuestionText = promptHole
	if p.ChatContext != nil && p.ChatContext.Text == m.prompt {
		p.ChatContext = &chatContext{Text: promptHole} // p is a copy; its context is shared
		holes++
	}
	env, err := requestJSON(id, "chat/ask", p)
	if err != nil {
		return nil, false, err
	}
	hole, _ := json.Marshal(promptHole) // a string always encodes
	m.parts = bytes.Split(env[frameRoom:], hole)
	if len(m.parts) != holes+1 {
		return nil, false, nil
	}
	body := len(env) - frameRoom - holes*len(hole) + holes*jsonx.StringLen(m.prompt)
	m.header = strconv.AppendInt([]byte("Content-Length: "), int64(body), 10)
	m.header = append(m.header, "\r\n\r\n"...)
	m.size = len(m.header) + body
	return m, true, nil
}

// bytes is the whole frame, in one allocation of its size.
func (m *askMessage) bytes() []byte {
	b := make([]byte, 0, m.size)
	b = append(b, m.header...)
	for i, part := range m.parts {
		if i > 0 {
			b = jsonx.AppendString(b, m.prompt)
		}
		b = append(b, part...)
	}
	return b
}

// stream writes the frame to w a piece at a time, the prompt escaped piece
// by piece into a buffer of its own. A piece ends where a character starts,
// so each escapes as it would within the whole prompt.
func (m *askMessage) stream(w io.Writer, piece int) error {
	buf := make([]byte, 0, 6*piece+2)
	write := func(b []byte) error { _, err := w.Write(b); return err }
	if err := write(append(buf[:0], m.header...)); err != nil {
		return err
	}
	for i, part := range m.parts {
		if i > 0 {
			if err := m.streamPrompt(write, buf, piece); err != nil {
				return err
			}
		}
		if err := write(part); err != nil {
			return err
		}
	}
	return nil
}

func (m *askMessage) streamPrompt(write func([]byte) error, buf []byte, piece int) error {
	if err := write([]byte{'"'}); err != nil {
		return err
	}
	for s := m.prompt; len(s) > 0; {
		n := min(piece, len(s))
		for k := n; n < len(s) && k > n-utf8.UTFMax && k > 0; k-- {
			if utf8.RuneStart(s[k]) {
				n = k
				break
			}
		}
		esc := jsonx.AppendString(buf[:0], s[:n])
		if err := write(esc[1 : len(esc)-1]); err != nil { // without its quotes
			return err
		}
		s = s[n:]
	}
	return write([]byte{'"'})
}

// send frames one request and writes it, refusing one larger than MaxFrame
// (the worker would drop the whole connection: bound.go).
func (c *Client) send(id int64, method string, params any) error {
	if p, ok := params.(askParams); ok && len(p.QuestionText) >= askFrameMin {
		m, ok, err := newAskMessage(id, p)
		if err != nil {
			return err
		}
		if ok {
			if int64(m.size) > c.cfg.MaxFrame {
				return &chat.TooLargeError{Size: int64(m.size), Limit: c.cfg.MaxFrame}
			}
			if m.size >= streamMin {
				return c.writeStream(m, c.cfg.CallTimeout)
			}
			return c.write(m.bytes(), c.cfg.CallTimeout)
		}
	}
	frame, err := requestFrame(id, method, params)
	if err != nil {
		return err
	}
	if int64(len(frame)) > c.cfg.MaxFrame {
		return &chat.TooLargeError{Size: int64(len(frame)), Limit: c.cfg.MaxFrame}
	}
	return c.write(frame, c.cfg.CallTimeout)
}

// writeStream is write for a frame streamed as a fragmented message, under
// the same watchdog.
func (c *Client) writeStream(m *askMessage, timeout time.Duration) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.watchdog.Reset(timeout)
	w, err := c.conn.Writer(context.Background(), websocket.MessageText)
	if err == nil {
		err = m.stream(w, streamPiece)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
	}
	if !c.watchdog.Stop() && err == nil {
		err = errWriteTimeout
	}
	if err != nil {
		return fmt.Errorf("%w: %w", chat.ErrWorkerGone, err)
	}
	return nil
}
