// Package lsp is the JSON-RPC 2.0 message shape and the LSP-style
// Content-Length framing that the Lingma worker speaks over WebSocket. It is
// shared by the pool/lingma driver and the bundled simulator, which must stay
// wire-compatible.
package lsp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
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
	for _, line := range bytes.Split(buf[:i], []byte("\r\n")) {
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
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("decode jsonrpc: %w", err)
	}
	if m.JSONRPC != "2.0" {
		return nil, fmt.Errorf("not jsonrpc 2.0: %q", m.JSONRPC)
	}
	return &m, nil
}
