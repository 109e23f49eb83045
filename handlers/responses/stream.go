package responses

import (
	"encoding/json"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/jsonx"
)

// streamEncoder writes a response as Responses API stream events, every one
// with a rising sequence_number; the relay drives it. Deltas are built in
// one reused buffer, so they cost no allocation; the lifecycle events
// carrying the whole response object are marshalled with encoding/json (a
// handful per stream).
type streamEncoder struct {
	builder
	w   relay.EventWriter
	buf []byte
	seq int
	// final is the JSON of the response as it ended (completed, incomplete
	// or failed), for the store; nil until it ends.
	final []byte
	// end is how the stream ends (Shapes.Ending).
	end ending
}

var _ relay.Encoder = (*streamEncoder)(nil)

func newStreamEncoder(w relay.EventWriter, resp *responseObject, refs toolRefs, end ending) *streamEncoder {
	return &streamEncoder{builder: builder{resp: resp, refs: refs}, w: w, buf: make([]byte, 0, 512), end: end}
}

// head starts an event's JSON: type and sequence number.
func (e *streamEncoder) head(typ string) []byte {
	b := append(e.buf[:0], `{"type":`...)
	b = jsonx.AppendString(b, typ)
	b = append(b, `,"sequence_number":`...)
	b = appendInt(b, e.seq)
	e.seq++
	return b
}

func (e *streamEncoder) emit(typ string, b []byte) error {
	e.buf = b
	return e.w.Event(typ, b)
}

// withResponse writes a lifecycle event carrying the response object and
// returns the object's JSON.
func (e *streamEncoder) withResponse(typ string) ([]byte, error) {
	obj, err := json.Marshal(e.resp)
	if err != nil {
		return nil, err
	}
	b := append(e.head(typ), `,"response":`...)
	b = append(b, obj...)
	return obj, e.emit(typ, append(b, '}'))
}

// start writes response.created and response.in_progress.
func (e *streamEncoder) start() error {
	if _, err := e.withResponse("response.created"); err != nil {
		return err
	}
	_, err := e.withResponse("response.in_progress")
	return err
}

// itemEvent writes output_item.added or .done for it at the given index.
func (e *streamEncoder) itemEvent(typ string, index int, it *item) error {
	b := append(e.head(typ), `,"output_index":`...)
	b = appendInt(b, index)
	b = append(b, `,"item":`...)
	b = it.wire(b)
	return e.emit(typ, append(b, '}'))
}

// partEvent writes content_part.added or .done of the open message.
func (e *streamEncoder) partEvent(typ string, text []byte) error {
	b := e.itemRef(typ, e.msgID)
	b = append(b, `,"content_index":0,"part":{"type":"output_text","text":`...)
	b = jsonx.AppendString(b, string(text))
	return e.emit(typ, append(b, `,"annotations":[],"logprobs":[]}}`...))
}

// itemRef starts an event about the item at the current output index.
func (e *streamEncoder) itemRef(typ, id string) []byte {
	b := append(e.head(typ), `,"item_id":`...)
	b = jsonx.AppendString(b, id)
	b = append(b, `,"output_index":`...)
	return appendInt(b, len(e.resp.Output))
}

func (e *streamEncoder) openMessage() error {
	e.builder.openMessage()
	it := item{ID: e.msgID, Type: "message", Status: "in_progress", Role: chat.RoleAssistant}
	if err := e.itemEvent("response.output_item.added", len(e.resp.Output), &it); err != nil {
		return err
	}
	return e.partEvent("response.content_part.added", nil)
}

// text writes one output_text.delta, opening the message first if needed.
func (e *streamEncoder) text(s string) error {
	if !e.msgOpen {
		if err := e.openMessage(); err != nil {
			return err
		}
	}
	if s == "" {
		return nil
	}
	e.builder.text = append(e.builder.text, s...)
	b := e.itemRef("response.output_text.delta", e.msgID)
	b = append(b, `,"content_index":0,"delta":`...)
	b = jsonx.AppendString(b, s)
	return e.emit("response.output_text.delta", append(b, `,"logprobs":[]}`...))
}

// closeMessage writes output_text.done, content_part.done and
// output_item.done for the open message.
func (e *streamEncoder) closeMessage() error {
	b := e.itemRef("response.output_text.done", e.msgID)
	b = append(b, `,"content_index":0,"text":`...)
	b = jsonx.AppendString(b, string(e.builder.text))
	if err := e.emit("response.output_text.done", append(b, `,"logprobs":[]}`...)); err != nil {
		return err
	}
	if err := e.partEvent("response.content_part.done", e.builder.text); err != nil {
		return err
	}
	index := len(e.resp.Output)
	return e.itemEvent("response.output_item.done", index, e.builder.closeMessage("completed"))
}

// toolCall writes a whole call: item added (in progress), its arguments (or
// a custom tool's input) as one delta, then done, item done.
func (e *streamEncoder) toolCall(tc *chat.ToolCall) error {
	if e.msgOpen {
		if err := e.closeMessage(); err != nil {
			return err
		}
	}
	index := len(e.resp.Output)
	done := *e.addCall(tc)
	added := done
	added.Status, added.Arguments, added.Input = "in_progress", "", ""
	if err := e.itemEvent("response.output_item.added", index, &added); err != nil {
		return err
	}
	deltaType, doneType, payload := "response.function_call_arguments.delta", "response.function_call_arguments.done", done.Arguments
	if done.Type == "custom_tool_call" {
		deltaType, doneType, payload = "response.custom_tool_call_input.delta", "response.custom_tool_call_input.done", done.Input
	}
	b := append(e.head(deltaType), `,"item_id":`...)
	b = jsonx.AppendString(b, done.ID)
	b = append(b, `,"output_index":`...)
	b = appendInt(b, index)
	b = append(b, `,"delta":`...)
	b = jsonx.AppendString(b, payload)
	if err := e.emit(deltaType, append(b, '}')); err != nil {
		return err
	}
	b = append(e.head(doneType), `,"item_id":`...)
	b = jsonx.AppendString(b, done.ID)
	b = append(b, `,"output_index":`...)
	b = appendInt(b, index)
	if done.Type == "custom_tool_call" {
		b = append(b, `,"input":`...)
	} else {
		b = append(b, `,"name":`...)
		b = jsonx.AppendString(b, done.Name)
		b = append(b, `,"arguments":`...)
	}
	b = jsonx.AppendString(b, payload)
	if err := e.emit(doneType, append(b, '}')); err != nil {
		return err
	}
	return e.itemEvent("response.output_item.done", index, &done)
}

// done closes the output and writes response.completed or
// response.incomplete; it returns the final object's JSON for the store.
// An answer with no output at all still gets one (empty) message, so every
// response has something to show.
func (e *streamEncoder) done(ev *chat.Event) ([]byte, error) {
	if !e.msgOpen && len(e.resp.Output) == 0 {
		if err := e.openMessage(); err != nil {
			return nil, err
		}
	}
	if e.msgOpen {
		if err := e.closeMessage(); err != nil {
			return nil, err
		}
	}
	e.finish(ev)
	e.setOutputText()
	if e.resp.Status == "incomplete" {
		return e.withResponse("response.incomplete")
	}
	return e.withResponse("response.completed")
}

// Open writes response.created and response.in_progress.
func (e *streamEncoder) Open() error { return e.start() }

func (e *streamEncoder) Text(s string) error { return e.text(s) }

func (e *streamEncoder) ToolCall(tc chat.ToolCall) error { return e.toolCall(&tc) }

// Done writes the closing events of a complete answer.
func (e *streamEncoder) Done(ev chat.Event) error {
	obj, err := e.done(&ev)
	e.final = obj
	return e.trail(err)
}

// Fail writes response.failed; a message cut off mid-way stays in the
// output marked incomplete, so the client keeps what it was shown.
func (e *streamEncoder) Fail(p *apierr.Problem) error {
	e.failing(p)
	e.setOutputText()
	obj, err := e.withResponse(e.end.failed)
	e.final = obj
	return e.trail(err)
}

// failedObject is the failed response's JSON, written nowhere: a stream
// whose client went away is still stored as it ended.
func (e *streamEncoder) failedObject(p *apierr.Problem) []byte {
	e.failing(p)
	obj, _ := json.Marshal(e.resp)
	return obj
}

func (e *streamEncoder) failing(p *apierr.Problem) {
	if e.msgOpen {
		e.builder.closeMessage("incomplete")
	}
	e.fail(p)
}

// KeepAlive writes an SSE comment.
func (e *streamEncoder) KeepAlive() error { return e.w.Comment("keep-alive") }
