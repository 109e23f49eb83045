package openaichat

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/openaierr"
	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/jsonx"
	"github.com/poolgate/poolgate/internal/openaiwire"
)

// completion is the non-streaming response body.
type completion = openaiwire.Completion

func usageOf(u chat.Usage) openaiwire.Usage {
	return openaiwire.Usage{PromptTokens: u.InputTokens, CompletionTokens: u.OutputTokens, TotalTokens: u.InputTokens + u.OutputTokens}
}

// finishReason maps the neutral finish reason to OpenAI's. A stop sequence
// is "stop" on this protocol; an answer that called tools ends with
// "tool_calls" even if the worker said "stop", since clients key on it.
func finishReason(f chat.FinishReason, calledTools bool) string {
	switch f {
	case chat.FinishLength:
		return "length"
	case chat.FinishToolCalls:
		return "tool_calls"
	}
	if calledTools {
		return "tool_calls"
	}
	return "stop"
}

// streamEncoder builds the data payloads of one chat.completion.chunk
// stream. The id/object/created/model head is rendered once; every chunk
// reuses one buffer, so a text delta costs no allocation. A payload returned
// by a method is valid until the next call.
type streamEncoder struct {
	head  []byte // `{"id":...,"model":...,"choices":[`
	usage bool   // stream_options.include_usage: "usage":null on each chunk
	buf   []byte
	tools int // tool calls sent so far: the next call's index
}

func newStreamEncoder(id, model string, created int64, includeUsage bool) *streamEncoder {
	head := make([]byte, 0, 96+len(id)+len(model))
	head = append(head, `{"id":`...)
	head = jsonx.AppendString(head, id)
	head = append(head, `,"object":"chat.completion.chunk","created":`...)
	head = strconv.AppendInt(head, created, 10)
	head = append(head, `,"model":`...)
	head = jsonx.AppendString(head, model)
	head = append(head, `,"choices":[`...)
	return &streamEncoder{head: head, usage: includeUsage, buf: make([]byte, 0, 512)}
}

// begin starts a chunk with one choice whose delta follows.
func (e *streamEncoder) begin() []byte {
	b := append(e.buf[:0], e.head...)
	return append(b, `{"index":0,"delta":`...)
}

// end closes a chunk begun with begin; finish is the JSON finish_reason.
func (e *streamEncoder) end(b []byte, finish string) []byte {
	b = append(b, `,"logprobs":null,"finish_reason":`...)
	b = append(b, finish...)
	b = append(b, "}]"...)
	if e.usage {
		b = append(b, `,"usage":null`...)
	}
	b = append(b, '}')
	e.buf = b
	return b
}

// role is the first chunk: the assistant role and empty content.
func (e *streamEncoder) role() []byte {
	b := e.begin()
	b = append(b, `{"role":"assistant","content":""}`...)
	return e.end(b, "null")
}

// text is a content delta.
func (e *streamEncoder) text(s string) []byte {
	b := e.begin()
	b = append(b, `{"content":`...)
	b = jsonx.AppendString(b, s)
	b = append(b, '}')
	return e.end(b, "null")
}

// toolCallHead opens the next tool call: its index, id, type and name with
// empty arguments, as OpenAI sends the first fragment of a call.
func (e *streamEncoder) toolCallHead(id, name string) []byte {
	b := e.begin()
	b = append(b, `{"tool_calls":[{"index":`...)
	b = strconv.AppendInt(b, int64(e.tools), 10)
	b = append(b, `,"id":`...)
	b = jsonx.AppendString(b, id)
	b = append(b, `,"type":"function","function":{"name":`...)
	b = jsonx.AppendString(b, name)
	b = append(b, `,"arguments":""}}]}`...)
	return e.end(b, "null")
}

// toolCallArgs sends the arguments of the call opened last, then moves on
// to the next index.
func (e *streamEncoder) toolCallArgs(args string) []byte {
	b := e.begin()
	b = append(b, `{"tool_calls":[{"index":`...)
	b = strconv.AppendInt(b, int64(e.tools), 10)
	b = append(b, `,"function":{"arguments":`...)
	b = jsonx.AppendString(b, args)
	b = append(b, `}}]}`...)
	e.tools++
	return e.end(b, "null")
}

// finish is the last chunk with a choice: an empty delta and the reason.
func (e *streamEncoder) finish(reason string) []byte {
	b := e.begin()
	b = append(b, "{}"...)
	return e.end(b, strconv.Quote(reason))
}

// usageChunk is the extra chunk stream_options.include_usage asks for: no
// choices, only the usage.
func (e *streamEncoder) usageChunk(u chat.Usage) []byte {
	b := append(e.buf[:0], e.head...)
	b = append(b, `],"usage":{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(u.InputTokens), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(u.OutputTokens), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(u.InputTokens+u.OutputTokens), 10)
	b = append(b, "}}"...)
	e.buf = b
	return b
}

// doneData is the payload of the stream's closing frame.
var doneData = []byte("[DONE]")

// stream is one chat.completion.chunk stream, driven by the relay. The role
// chunk goes out with the first event, so a stream opened early by a
// keep-alive (a comment) still starts its answer with it.
type stream struct {
	w      relay.EventWriter
	enc    *streamEncoder
	newID  func(prefix string) string
	called bool // a tool call was sent
	begun  bool // the role chunk was sent
}

var _ relay.Encoder = (*stream)(nil)

// Open sends nothing: this protocol has no opening frame.
func (s *stream) Open() error { return nil }

func (s *stream) begin() error {
	if s.begun {
		return nil
	}
	s.begun = true
	return s.w.Event("", s.enc.role())
}

func (s *stream) Text(text string) error {
	if err := s.begin(); err != nil || text == "" {
		return err
	}
	return s.w.Event("", s.enc.text(text))
}

func (s *stream) ToolCall(tc chat.ToolCall) error {
	if err := s.begin(); err != nil {
		return err
	}
	s.called = true
	rc := replyCall(&tc, s.newID)
	if err := s.w.Event("", s.enc.toolCallHead(rc.ID, rc.Function.Name)); err != nil {
		return err
	}
	return s.w.Event("", s.enc.toolCallArgs(rc.Function.Arguments))
}

// Done sends the finish chunk, the usage chunk when asked for, and [DONE].
func (s *stream) Done(ev chat.Event) error {
	if err := s.begin(); err != nil {
		return err
	}
	if err := s.w.Event("", s.enc.finish(finishReason(ev.Finish, s.called))); err != nil {
		return err
	}
	if s.enc.usage {
		if err := s.w.Event("", s.enc.usageChunk(ev.Usage)); err != nil {
			return err
		}
	}
	return s.w.Event("", doneData)
}

// Fail sends the error frame, the same {"error":{...}} object as an error
// response body, which OpenAI's SDKs raise as an error.
func (s *stream) Fail(p *apierr.Problem) error {
	s.enc.buf = openaierr.Append(s.enc.buf[:0], p)
	return s.w.Event("", s.enc.buf)
}

func (s *stream) KeepAlive() error { return s.w.Comment("keep-alive") }

// reply folds a whole answer into one chat.completion body.
type reply struct {
	relay.Collected
	c     completion
	newID func(prefix string) string
	extra *extras // nil: OpenAI's shape only
}

// extras are what Config.Extra is told of an answer.
type extras struct {
	add          func(body []byte, instance string, firstMS, totalMS int64) []byte
	instance     string // the instance that served the answer
	start, first time.Time
}

// Text notes when the first text came, for Config.Extra.
func (r *reply) Text(s string) error {
	if r.extra != nil && r.extra.first.IsZero() {
		r.extra.first = time.Now()
	}
	return r.Collected.Text(s)
}

// ServedBy notes the instance, for Config.Extra.
func (r *reply) ServedBy(instance string) {
	if r.extra != nil {
		r.extra.instance = instance
	}
}

func (r *reply) Body(done chat.Event) ([]byte, error) {
	var calls []openaiwire.ToolCall
	if len(r.Calls) > 0 {
		calls = make([]openaiwire.ToolCall, len(r.Calls))
		for i := range r.Calls {
			calls[i] = replyCall(&r.Calls[i], r.newID)
		}
	}
	msg := openaiwire.CompletionMessage{Role: "assistant", ToolCalls: calls}
	if s := r.Content(); s != "" || len(calls) == 0 {
		msg.Content = &s
	}
	r.c.Choices = []openaiwire.Choice{{Message: msg, FinishReason: finishReason(done.Finish, len(calls) > 0)}}
	r.c.Usage = usageOf(done.Usage)
	b, err := json.Marshal(&r.c)
	if x := r.extra; x != nil && err == nil {
		now := time.Now()
		first := x.first
		if first.IsZero() {
			first = now // tool calls only: the answer came at the end
		}
		b = x.add(b, x.instance, first.Sub(x.start).Milliseconds(), now.Sub(x.start).Milliseconds())
	}
	return b, err
}

// replyCall is a call as the client sees it: an id (made up when the worker
// gave none) and an arguments object ("{}" when empty).
func replyCall(tc *chat.ToolCall, newID func(string) string) openaiwire.ToolCall {
	id := tc.ID
	if id == "" {
		id = newID("call_")
	}
	args := tc.Arguments
	if args == "" {
		args = "{}"
	}
	return openaiwire.ToolCall{ID: id, Type: "function", Function: openaiwire.Function{Name: tc.Name, Arguments: args}}
}
