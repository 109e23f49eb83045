package gemini

import (
	"crypto/rand"
	"strconv"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/jsonx"
)

// An answer is a GenerateContentResponse: one candidate whose content holds
// the parts (text, then function calls), its finishReason, the usage, the
// model the client asked for and the response's id. A stream is a sequence
// of them, each with the parts that arrived; the last one carries the
// finishReason and the usage.

func newResponseID() string { return rand.Text() }

// finishReason maps the neutral finish to Gemini's. A stop sequence ends
// an answer with STOP there too; a turn that made function calls as well.
func finishReason(f chat.FinishReason) string {
	if f == chat.FinishLength {
		return "MAX_TOKENS"
	}
	return "STOP"
}

func appendTextPart(b []byte, s string) []byte {
	b = append(b, `{"text":`...)
	b = jsonx.AppendString(b, s)
	return append(b, '}')
}

func appendCallPart(b []byte, tc chat.ToolCall) []byte {
	b = append(b, `{"functionCall":{`...)
	if tc.ID != "" {
		b = append(b, `"id":`...)
		b = jsonx.AppendString(b, tc.ID)
		b = append(b, ',')
	}
	b = append(b, `"name":`...)
	b = jsonx.AppendString(b, tc.Name)
	b = append(b, `,"args":`...)
	b = append(b, relay.ObjectArgs(tc.Arguments)...)
	return append(b, "}}"...)
}

// response writes the frame around a response's parts.
type response struct {
	model, id string
}

// open appends the response up to its parts, which follow.
func (r *response) open(b []byte) []byte {
	return append(b, `{"candidates":[{"content":{"role":"model","parts":[`...)
}

// close appends the rest: the finishReason and the usage when done is not
// nil (the answer's last response), the model and the id.
func (r *response) close(b []byte, done *chat.Event) []byte {
	b = append(b, "]}"...)
	if done != nil {
		b = append(b, `,"finishReason":`...)
		b = jsonx.AppendString(b, finishReason(done.Finish))
	}
	b = append(b, `,"index":0}]`...)
	if done != nil {
		u := done.Usage
		b = append(b, `,"usageMetadata":{"promptTokenCount":`...)
		b = strconv.AppendInt(b, int64(u.InputTokens), 10)
		b = append(b, `,"candidatesTokenCount":`...)
		b = strconv.AppendInt(b, int64(u.OutputTokens), 10)
		b = append(b, `,"totalTokenCount":`...)
		b = strconv.AppendInt(b, int64(u.InputTokens+u.OutputTokens), 10)
		b = append(b, '}')
	}
	b = append(b, `,"modelVersion":`...)
	b = jsonx.AppendString(b, r.model)
	b = append(b, `,"responseId":`...)
	b = jsonx.AppendString(b, r.id)
	return append(b, '}')
}

// reply folds a whole answer into one response.
type reply struct {
	relay.Collected
	response
}

func newReply(model string) *reply {
	return &reply{response: response{model: model, id: newResponseID()}}
}

var _ relay.BodyEncoder = (*reply)(nil)

// Body is the whole answer: its text as one part, then its calls.
func (r *reply) Body(done chat.Event) ([]byte, error) {
	text := r.Content()
	b := r.open(make([]byte, 0, 256+len(text)))
	n := 0
	if text != "" {
		b = appendTextPart(b, text)
		n++
	}
	for _, tc := range r.Calls {
		if n > 0 {
			b = append(b, ',')
		}
		b = appendCallPart(b, tc)
		n++
	}
	return r.close(b, &done), nil
}

// eventWriter is the part of relay.SSE the stream encoder needs: SSE
// events, or, for the JSON-array stream, raw bytes.
type eventWriter interface {
	Event(name string, data []byte) error
	Raw(b []byte) error
}

// streamEncoder writes an answer as it comes: server-sent events of one
// response each (alt=sse, what every SDK asks for), or one JSON array of
// responses written element by element (the API's default without alt).
// The relay drives it. It keeps one buffer for every frame.
type streamEncoder struct {
	response
	w     eventWriter
	array bool
	buf   []byte
	n     int // responses written
}

func newStreamEncoder(w eventWriter, model string, array bool) *streamEncoder {
	return &streamEncoder{response: response{model: model, id: newResponseID()}, w: w, array: array, buf: make([]byte, 0, 512)}
}

var _ relay.Encoder = (*streamEncoder)(nil)

// Open starts the JSON array; an event stream needs no opening.
func (e *streamEncoder) Open() error {
	if !e.array {
		return nil
	}
	return e.w.Raw(append(e.buf[:0], '[')) // buf is free until the first frame
}

// start returns the buffer a frame is built in: after the separator when
// an element of the array came before.
func (e *streamEncoder) start() []byte {
	b := e.buf[:0]
	if e.array && e.n > 0 {
		b = append(b, ",\r\n"...)
	}
	return b
}

// frame writes one response (or error object) built in b.
func (e *streamEncoder) frame(b []byte) error {
	e.buf = b
	e.n++
	if !e.array {
		return e.w.Event("", b)
	}
	return e.w.Raw(b)
}

// Text writes a response with one text part.
func (e *streamEncoder) Text(s string) error {
	if s == "" {
		return nil
	}
	b := appendTextPart(e.open(e.start()), s)
	return e.frame(e.close(b, nil))
}

// ToolCall writes a response with one functionCall part.
func (e *streamEncoder) ToolCall(tc chat.ToolCall) error {
	b := appendCallPart(e.open(e.start()), tc)
	return e.frame(e.close(b, nil))
}

// Done writes the last response: no parts, the finishReason and the
// usage; then the array's end.
func (e *streamEncoder) Done(ev chat.Event) error {
	if err := e.frame(e.close(e.open(e.start()), &ev)); err != nil || !e.array {
		return err
	}
	return e.w.Raw(append(e.buf[:0], ']'))
}

// Fail writes the error object as the stream's last element, in Google's
// shape; the relay then closes the stream.
func (e *streamEncoder) Fail(p *apierr.Problem) error {
	if err := e.frame(appendError(e.start(), p)); err != nil || !e.array {
		return err
	}
	return e.w.Raw(append(e.buf[:0], ']'))
}

// KeepAlive keeps a quiet stream open with what its clients skip: a
// response with no parts (SSE comments break both Google SDKs' readers),
// or whitespace between the array's elements.
func (e *streamEncoder) KeepAlive() error {
	if e.array {
		return e.w.Raw(append(e.buf[:0], '\n'))
	}
	return e.w.Event("", e.close(e.open(e.buf[:0]), nil))
}
