// Package lingmarpc is the Lingma worker's wire: JSON-RPC 2.0 messages, each
// framed by a Content-Length header (the framing LSP uses, though the
// methods are Lingma's own), sent over WebSocket. It is shared by the
// pool/lingma driver and the bundled simulator, which must stay
// wire-compatible.
package lingmarpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/poolgate/poolgate/internal/jsonx"
)

// Message is any JSON-RPC 2.0 message: a request (Method and ID), a
// notification (Method, no ID) or a response (ID with Result or Error).
type Message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// IsRequest reports whether m expects a response.
func (m *Message) IsRequest() bool { return m.Method != "" && len(m.ID) > 0 }

// IsResponse reports whether m answers an earlier request.
func (m *Message) IsResponse() bool { return m.Method == "" && len(m.ID) > 0 }

// Error is a JSON-RPC error object.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return fmt.Sprintf("jsonrpc error %d: %s", e.Code, e.Message) }

// MaxFrame caps one framed message (16 MiB).
const MaxFrame = 16 << 20

var headerSep = []byte("\r\n\r\n")

// Encode frames m as `Content-Length: N\r\n\r\n` + JSON.
func Encode(m *Message) ([]byte, error) {
	if m.JSONRPC == "" {
		m.JSONRPC = "2.0"
	}
	body, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode jsonrpc: %w", err)
	}
	out := make([]byte, 0, len(body)+32)
	out = append(out, "Content-Length: "...)
	out = strconv.AppendInt(out, int64(len(body)), 10)
	out = append(out, headerSep...)
	return append(out, body...), nil
}

// ErrIncomplete means the buffer holds only part of a frame.
var ErrIncomplete = errors.New("incomplete frame")

// Split takes the first framed message off buf. It returns the message body,
// the rest of buf, or ErrIncomplete when more bytes are needed. Readers
// buffer across WebSocket messages and call Split until ErrIncomplete.
func Split(buf []byte) (body, rest []byte, err error) {
	i := bytes.Index(buf, headerSep)
	if i < 0 {
		if len(buf) > 4096 {
			return nil, nil, errors.New("frame header too long")
		}
		return nil, buf, ErrIncomplete
	}
	n := -1
	for head, more := buf[:i], true; more; {
		var line []byte
		line, head, more = bytes.Cut(head, []byte("\r\n"))
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return nil, nil, fmt.Errorf("bad frame header line %q", line)
		}
		if bytes.EqualFold(bytes.TrimSpace(k), []byte("Content-Length")) {
			n, err = strconv.Atoi(string(bytes.TrimSpace(v)))
			if err != nil || n < 0 {
				return nil, nil, fmt.Errorf("bad Content-Length %q", v)
			}
		}
	}
	if n < 0 {
		return nil, nil, errors.New("frame without Content-Length")
	}
	if n > MaxFrame {
		return nil, nil, fmt.Errorf("frame of %d bytes exceeds %d", n, MaxFrame)
	}
	start := i + len(headerSep)
	if len(buf)-start < n {
		return nil, buf, ErrIncomplete
	}
	return buf[start : start+n], buf[start+n:], nil
}

// Decode parses one frame body.
func Decode(body []byte) (*Message, error) {
	var m Message
	if err := decode(body, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

func decode(body []byte, m *Message) error {
	if err := json.Unmarshal(body, m); err != nil {
		return fmt.Errorf("decode jsonrpc: %w", err)
	}
	if m.JSONRPC != "2.0" {
		return fmt.Errorf("not jsonrpc 2.0: %q", m.JSONRPC)
	}
	return nil
}

// Read parses one frame body into m, as Decode does, for a reader that
// handles each message before it reads the next. The shapes a worker sends
// all the time (a request, a notification or a response, with plain keys
// and method) are read in one pass, and then m's ID, Params and Result are
// slices of body, not copies: they are valid only as long as body is.
// Anything else is decoded by encoding/json, with Decode's result and error.
func Read(body []byte, m *Message) error {
	if readMessage(body, m) {
		return nil
	}
	*m = Message{}
	return decode(body, m)
}

var messageKeys = jsonx.NewNames("jsonrpc", "id", "method", "params", "result", "error")

// methods are the method names a worker sends most, interned: reading one
// allocates nothing.
var methods = []string{"chat/answer", "chat/think", "chat/finish", "tool/invoke"}

// readMessage is Read's one pass; false means it gave up (m is then
// partly set).
func readMessage(body []byte, m *Message) bool {
	*m = Message{}
	s := jsonx.NewScanner(body)
	ok := s.Fields(messageKeys, func(i int) bool {
		if s.Peek() == 'n' {
			return false // a null: encoding/json decides
		}
		var ok bool
		switch i {
		case 0:
			var v []byte
			if v, ok = s.PlainString(); ok && string(v) == "2.0" {
				m.JSONRPC = "2.0"
			}
			return ok && m.JSONRPC != ""
		case 1:
			m.ID, ok = s.Raw()
		case 2:
			var v []byte
			// encoding/json would mend invalid UTF-8: it reads those.
			if v, ok = s.PlainString(); ok && utf8.Valid(v) {
				m.Method = intern(v)
			}
			return ok && utf8.Valid(v)
		case 3:
			m.Params, ok = s.Raw()
		case 4:
			m.Result, ok = s.Raw()
		}
		return ok // an error object is rare: encoding/json reads it
	})
	return ok && s.End() && m.JSONRPC != ""
}

func intern(b []byte) string {
	for _, m := range methods {
		if m == string(b) {
			return m
		}
	}
	return string(b)
}
