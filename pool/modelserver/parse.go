package modelserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/pool/textchat"
)

const (
	// readBufSize is the pooled SSE reader's buffer; longer lines spill.
	// Every open stream holds one, over the transport's own 4 KiB buffer,
	// so it is no larger than a typical chunk needs.
	readBufSize = 4 << 10
	// maxEvent caps one SSE event's data, and a non-stream body (32 MiB).
	maxEvent = 32 << 20
)

var (
	// errTruncated: the body ended with neither a finish reason nor [DONE].
	errTruncated = errors.New("answer stream ended before its finish")
	// errListenerGone: the caller stopped listening; nothing more to send.
	errListenerGone = errors.New("listener gone")
)

// sseReader splits a server-sent event stream into events' data. It is
// pooled by the driver and reused across turns.
type sseReader struct {
	r    *bufio.Reader
	line []byte // spill for lines longer than r's buffer
	data []byte // the current event's data lines, joined by "\n"

	// A json.Decoder reused across events keeps its scanner and decode
	// state, where json.Unmarshal would allocate them for every chunk.
	dec *json.Decoder
	src bytes.Reader // the event being decoded
	fed int64        // bytes given to dec so far
}

func (s *sseReader) reset(r io.Reader) {
	s.r.Reset(r)
	if cap(s.line) > 1<<20 {
		s.line = nil
	}
	if cap(s.data) > 1<<20 {
		s.data, s.dec = nil, nil // the decoder's buffer grew as large
	}
	s.line, s.data = s.line[:0], s.data[:0]
}

// eventBuffered says whether the reader's buffer holds a whole data event
// (a line starting "data:", then a blank line), so that next returns it
// without waiting. It may miss one (other spellings), never the reverse.
// The closing [DONE] does not count: after it the answer's end is read,
// which may wait.
func (s *sseReader) eventBuffered() bool {
	b, _ := s.r.Peek(s.r.Buffered())
	for {
		i := bytes.Index(b, []byte("data:"))
		if i < 0 {
			return false
		}
		if i == 0 || b[i-1] == '\n' {
			rest := b[i:]
			if v := bytes.TrimLeft(rest[len("data:"):], " "); bytes.HasPrefix(v, []byte("[DONE]")) {
				return false
			}
			return bytes.Contains(rest, []byte("\n\n")) || bytes.Contains(rest, []byte("\n\r\n"))
		}
		b = b[i+1:]
	}
}

// decode parses one JSON value that must fill b, like json.Unmarshal.
func (s *sseReader) decode(b []byte, v any) error {
	if s.dec == nil {
		s.dec, s.fed = json.NewDecoder(&s.src), 0
	}
	s.src.Reset(b)
	s.fed += int64(len(b))
	err := s.dec.Decode(v)
	if rest := s.fed - s.dec.InputOffset(); err == nil && rest > 0 && len(bytes.TrimSpace(b[int64(len(b))-rest:])) > 0 {
		err = errors.New("invalid data after the JSON value")
	}
	if err != nil {
		s.dec = nil // its error is sticky and its buffer may hold junk
	}
	return err
}

// firstByte skips leading whitespace and peeks at the first byte (0 when
// the body is empty or fails).
func (s *sseReader) firstByte() byte {
	for {
		b, err := s.r.Peek(1)
		if err != nil {
			return 0
		}
		switch b[0] {
		case ' ', '\t', '\r', '\n':
			_, _ = s.r.ReadByte()
		default:
			return b[0]
		}
	}
}

// readLine returns the next line with its end of line; valid until the next
// call. At the end it returns what is left (maybe nothing) and io.EOF.
func (s *sseReader) readLine() ([]byte, error) {
	line, err := s.r.ReadSlice('\n')
	if err != bufio.ErrBufferFull {
		return line, err
	}
	s.line = append(s.line[:0], line...)
	for {
		line, err = s.r.ReadSlice('\n')
		s.line = append(s.line, line...)
		if len(s.line) > maxEvent {
			return nil, &chat.UpstreamError{Message: fmt.Sprintf("stream line longer than %d bytes", maxEvent)}
		}
		if err != bufio.ErrBufferFull {
			return s.line, err
		}
	}
}

// next returns the data of the next event and whether the server marked it
// as an error (an "event: error" or llama.cpp's "error:" field), or io.EOF
// after the last event. Besides standard SSE it accepts bare JSON lines
// (newline-delimited JSON) as one event each. data is valid until the next
// call.
func (s *sseReader) next() (data []byte, isErr bool, err error) {
	s.data = s.data[:0]
	pending := false
	for {
		line, rerr := s.readLine()
		if rerr != nil && rerr != io.EOF {
			return nil, false, rerr
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			if pending {
				return s.data, isErr, nil
			}
			if rerr == io.EOF {
				return nil, false, io.EOF
			}
			continue
		}
		field, value := splitField(line)
		switch string(field) {
		case "data", "error":
			isErr = isErr || string(field) == "error"
			if pending {
				s.data = append(s.data, '\n')
			}
			s.data = append(s.data, value...)
			pending = true
			if len(s.data) > maxEvent {
				return nil, false, &chat.UpstreamError{Message: fmt.Sprintf("stream event larger than %d bytes", maxEvent)}
			}
		case "event":
			isErr = isErr || string(value) == "error"
		case "{":
			if !pending {
				s.data = append(s.data, line...)
				return s.data, isErr, nil
			}
		}
		if rerr == io.EOF && !pending {
			return nil, false, io.EOF
		}
	}
}

// splitField splits an SSE line into its field and value. A comment has the
// field ":", a bare JSON object line the field "{".
func splitField(line []byte) (field, value []byte) {
	switch line[0] {
	case ':':
		return line[:1], nil
	case '{':
		return line[:1], line
	}
	i := bytes.IndexByte(line, ':')
	if i < 0 {
		return line, nil
	}
	value = line[i+1:]
	if len(value) > 0 && value[0] == ' ' {
		value = value[1:]
	}
	return line[:i], value
}

// accumulator turns an answer's chunks into events: text is emitted as it
// comes, tool calls and usage are gathered for the end.
type accumulator struct {
	msg       chunk // reused decode target
	calls     []callAcc
	usage     chat.Usage
	finish    string
	sawFinish bool
	sawDone   bool
}

// callAcc is one tool call being assembled from deltas.
type callAcc struct {
	index    int
	id, name string
	args     []byte
}

// payload handles one event's data; end is true after [DONE].
func (a *accumulator) payload(r *sseReader, b []byte, isErr bool, emit func(chat.Event) bool) (end bool, err error) {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0:
		return false, nil
	case string(b) == "[DONE]":
		a.sawDone = true
		return true, nil
	case isErr:
		if err := payloadError(b); err != nil {
			return true, err
		}
		return true, &chat.UpstreamError{Message: "error event: " + clip(b)}
	}
	a.msg.reset()
	if fastChunk(b, &a.msg) {
		return false, a.apply(false, emit)
	}
	a.msg.reset() // the fast reader may have filled some of it
	if err := r.decode(b, &a.msg); err != nil {
		return true, &chat.UpstreamError{Message: fmt.Sprintf("malformed answer chunk (%v): %s", err, clip(b))}
	}
	return false, a.apply(false, emit)
}

// apply folds a.msg into the answer. whole says it came from a non-stream
// body, whose choices carry a message rather than a delta.
func (a *accumulator) apply(whole bool, emit func(chat.Event) bool) error {
	m := &a.msg
	if err := payloadError(m.Error); err != nil {
		return err
	}
	m.usageFields.mergeInto(&a.usage)
	m.Usage.mergeInto(&a.usage)
	m.XGroq.Usage.mergeInto(&a.usage)
	for i := range m.Choices {
		ch := &m.Choices[i]
		ch.Usage.mergeInto(&a.usage)
		text := string(ch.Delta.Content) + string(ch.Text)
		if whole {
			text = string(ch.Message.Content) + text
			a.addCalls(&ch.Message, true)
		}
		if text != "" && !emit(chat.Event{Type: chat.EventText, Text: text}) {
			return errListenerGone
		}
		a.addCalls(&ch.Delta, false)
		if ch.FinishReason != "" {
			a.finish, a.sawFinish = string(ch.FinishReason), true
		}
	}
	return nil
}

// whole reads a body that is not an event stream: one chat.completion, or a
// sequence of JSON chunks (newline-delimited JSON).
func (a *accumulator) whole(r *sseReader, emit func(chat.Event) bool) error {
	body, err := io.ReadAll(io.LimitReader(r.r, maxEvent+1))
	if err != nil {
		return err
	}
	if len(body) > maxEvent {
		return &chat.UpstreamError{Message: fmt.Sprintf("answer larger than %d bytes", maxEvent)}
	}
	a.sawFinish = true // a whole body is complete by definition
	a.msg.reset()
	if fastChunk(body, &a.msg) { // the usual answer: one chat.completion of text
		return a.apply(true, emit)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	for n := 0; ; n++ {
		start := dec.InputOffset()
		a.msg.reset()
		err := dec.Decode(&a.msg)
		if err == io.EOF && n > 0 {
			break
		}
		if err != nil {
			return &chat.UpstreamError{Message: fmt.Sprintf("malformed answer (%v): %s", err, clip(body[start:]))}
		}
		if err := a.apply(true, emit); err != nil {
			return err
		}
	}
	return nil
}

// addCalls folds tool call deltas into the calls. In a whole message each
// entry is its own call; in a stream the index says which call a fragment
// continues, and a delta without one continues the last call unless it
// brings a new id.
func (a *accumulator) addCalls(d *delta, whole bool) {
	for i := range d.ToolCalls {
		tc := &d.ToolCalls[i]
		var c *callAcc
		switch {
		case whole:
			c = a.newCall(a.nextIndex())
		case tc.Index.ok:
			c = a.callAt(tc.Index.n)
		case len(a.calls) == 0, tc.ID != "" && a.calls[len(a.calls)-1].id != "" && a.calls[len(a.calls)-1].id != string(tc.ID):
			c = a.newCall(a.nextIndex())
		default:
			c = &a.calls[len(a.calls)-1]
		}
		c.add(string(tc.ID), &tc.Function)
	}
	if f := d.FunctionCall; f != nil {
		c := a.callAt(0)
		if whole {
			c = a.newCall(a.nextIndex())
		}
		c.add("", f)
	}
}

func (a *accumulator) nextIndex() int {
	n := 0
	for _, c := range a.calls {
		n = max(n, c.index+1)
	}
	return n
}

func (a *accumulator) newCall(index int) *callAcc {
	a.calls = append(a.calls, callAcc{index: index})
	return &a.calls[len(a.calls)-1]
}

// callAt finds or starts the call with the given index.
func (a *accumulator) callAt(index int) *callAcc {
	for i := range a.calls {
		if a.calls[i].index == index {
			return &a.calls[i]
		}
	}
	return a.newCall(index)
}

// add folds one delta into the call. The id is kept from its first
// appearance; a name is set once (servers that repeat it are ignored, ones
// that split it are joined); arguments are fragments of a JSON string unless
// sent as an object, which replaces them.
func (c *callAcc) add(id string, f *toolFunction) {
	if c.id == "" {
		c.id = id
	}
	if n := string(f.Name); n != "" && n != c.name {
		c.name += n
	}
	if f.Arguments.whole {
		c.args = append(c.args[:0], f.Arguments.text...)
	} else {
		c.args = append(c.args, f.Arguments.text...)
	}
}

// toolCalls returns the finished calls, minting ids the server left out.
func (a *accumulator) toolCalls() ([]chat.ToolCall, error) {
	if len(a.calls) == 0 {
		return nil, nil
	}
	out := make([]chat.ToolCall, 0, len(a.calls))
	for _, c := range a.calls {
		if c.name == "" {
			return nil, &chat.UpstreamError{Message: "tool call without a function name"}
		}
		args, err := objectArgs(c.args)
		if err != nil {
			return nil, &chat.UpstreamError{Message: fmt.Sprintf("tool call %s: %v", c.name, err)}
		}
		id := c.id
		if id == "" {
			id = textchat.NewCallID() // as a call parsed from text gets one
		}
		out = append(out, chat.ToolCall{ID: id, Name: c.name, Arguments: args})
	}
	return out, nil
}

// objectArgs checks that arguments are a JSON object ("{}" when empty), and
// unwraps an object that a server encoded twice (as a JSON string).
func objectArgs(b []byte) (string, error) {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0:
		return "{}", nil
	case b[0] == '{' && json.Valid(b):
		return string(b), nil
	case b[0] == '"':
		var inner string
		if json.Unmarshal(b, &inner) == nil {
			if s, err := objectArgs([]byte(inner)); err == nil {
				return s, nil
			}
		}
	}
	return "", fmt.Errorf("arguments are not a JSON object: %s", clip(b))
}

// finishReason maps the server's finish reason to the neutral one. Servers
// that answer a tool call with "stop" (older llama.cpp) get tool_calls.
func (a *accumulator) finishReason() chat.FinishReason {
	switch a.finish {
	case "length", "max_tokens", "max_output_tokens":
		return chat.FinishLength
	case "tool_calls", "function_call", "tool_use":
		return chat.FinishToolCalls
	}
	if len(a.calls) > 0 {
		return chat.FinishToolCalls
	}
	return chat.FinishStop // stop, content_filter, eos, end_turn, unknown
}
