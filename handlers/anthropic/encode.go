package anthropic

import (
	"crypto/rand"
	"encoding/json"
	"strconv"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/jsonx"
)

// messageBody is the non-streaming answer (and message_start's message).
type messageBody struct {
	ID           string         `json:"id"`
	Type         string         `json:"type"`
	Role         string         `json:"role"`
	Model        string         `json:"model"`
	Content      []contentBlock `json:"content"`
	StopReason   *string        `json:"stop_reason"`
	StopSequence *string        `json:"stop_sequence"`
	Usage        usageBody      `json:"usage"`
}

// contentBlock is a text or tool_use block; MarshalJSON writes only the
// fields its type has (a text block always carries "text", even empty).
type contentBlock struct {
	Type  string
	Text  string
	ID    string
	Name  string
	Input string
}

func (c contentBlock) MarshalJSON() ([]byte, error) {
	return c.append(make([]byte, 0, 48+len(c.Text)+len(c.Input))), nil
}

func (c contentBlock) append(b []byte) []byte {
	if c.Type == "tool_use" {
		b = append(b, `{"type":"tool_use","id":`...)
		b = jsonx.AppendString(b, c.ID)
		b = append(b, `,"name":`...)
		b = jsonx.AppendString(b, c.Name)
		b = append(b, `,"input":`...)
		b = append(b, c.Input...)
		return append(b, '}')
	}
	b = append(b, `{"type":"text","text":`...)
	b = jsonx.AppendString(b, c.Text)
	return append(b, '}')
}

type usageBody struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

func newMessageID() string { return "msg_" + rand.Text() }

func newToolUseID() string { return "toolu_" + rand.Text() }

// stopReason maps the neutral finish to Anthropic's; a turn that made tool
// calls ends with tool_use whatever the worker said.
func stopReason(f chat.FinishReason, madeCalls bool) string {
	switch {
	case madeCalls:
		return "tool_use"
	case f == chat.FinishLength:
		return "max_tokens"
	case f == chat.FinishStopSequence:
		return "stop_sequence"
	case f == chat.FinishToolCalls:
		return "tool_use"
	default:
		return "end_turn"
	}
}

// reply folds a whole answer into the non-streaming message.
type reply struct {
	relay.Collected
	model string
}

func (r *reply) Body(done chat.Event) ([]byte, error) {
	return json.Marshal(r.message(&done))
}

func (r *reply) message(done *chat.Event) *messageBody {
	m := &messageBody{
		ID: newMessageID(), Type: "message", Role: "assistant", Model: r.model,
		Content: make([]contentBlock, 0, 1+len(r.Calls)),
		Usage:   usageBody{InputTokens: done.Usage.InputTokens, OutputTokens: done.Usage.OutputTokens},
	}
	if text := r.Content(); text != "" || len(r.Calls) == 0 {
		m.Content = append(m.Content, contentBlock{Type: "text", Text: text})
	}
	for _, tc := range r.Calls {
		id := tc.ID
		if id == "" {
			id = newToolUseID()
		}
		m.Content = append(m.Content, contentBlock{Type: "tool_use", ID: id, Name: tc.Name, Input: relay.ObjectArgs(tc.Arguments)})
	}
	reason := stopReason(done.Finish, len(r.Calls) > 0)
	m.StopReason = &reason
	if reason == "stop_sequence" {
		seq := done.StopSequence
		m.StopSequence = &seq
	}
	return m
}

// eventWriter is the part of relay.SSE the stream encoder needs.
type eventWriter interface {
	Event(name string, data []byte) error
}

// streamEncoder turns neutral events into Anthropic's SSE events; the relay
// drives it. It keeps one buffer for all frames, so a streamed delta costs
// no allocation.
type streamEncoder struct {
	w      eventWriter
	buf    []byte
	id     string
	model  string
	next   int  // index of the next content block
	inText bool // a text block is open at index next-1
	pinged bool
	calls  int
	// inputTokens is message_start's input token count (0: not counted).
	inputTokens int
}

func newStreamEncoder(w eventWriter, model string) *streamEncoder {
	return &streamEncoder{w: w, id: newMessageID(), model: model, buf: make([]byte, 0, 512)}
}

var _ relay.Encoder = (*streamEncoder)(nil)

// Open writes message_start, with the prompt's input tokens as the gateway
// counts them (Config.Count); message_delta's usage carries the final
// counts, the worker's own when it reports them.
func (e *streamEncoder) Open() error {
	b := append(e.buf[:0], `{"type":"message_start","message":{"id":`...)
	b = jsonx.AppendString(b, e.id)
	b = append(b, `,"type":"message","role":"assistant","model":`...)
	b = jsonx.AppendString(b, e.model)
	b = append(b, `,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(e.inputTokens), 10)
	b = append(b, `,"output_tokens":0}}}`...)
	return e.emit("message_start", b)
}

func (e *streamEncoder) emit(name string, b []byte) error {
	e.buf = b
	return e.w.Event(name, b)
}

// KeepAlive writes a ping event, as Anthropic does while a stream is quiet.
func (e *streamEncoder) KeepAlive() error { return e.ping() }

// ping writes a ping event (after the first block start, and as keep-alive).
func (e *streamEncoder) ping() error {
	e.pinged = true
	return e.emit("ping", append(e.buf[:0], `{"type":"ping"}`...))
}

func (e *streamEncoder) blockStart(block contentBlock) error {
	b := append(e.buf[:0], `{"type":"content_block_start","index":`...)
	b = strconv.AppendInt(b, int64(e.next), 10)
	b = append(b, `,"content_block":`...)
	b = block.append(b)
	b = append(b, '}')
	e.next++
	if err := e.emit("content_block_start", b); err != nil {
		return err
	}
	if !e.pinged {
		return e.ping()
	}
	return nil
}

func (e *streamEncoder) blockStop() error {
	e.inText = false
	b := append(e.buf[:0], `{"type":"content_block_stop","index":`...)
	b = strconv.AppendInt(b, int64(e.next-1), 10)
	return e.emit("content_block_stop", append(b, '}'))
}

// Text writes a text_delta, opening a text block first when none is open.
func (e *streamEncoder) Text(s string) error {
	if s == "" {
		return nil
	}
	if !e.inText {
		if err := e.blockStart(contentBlock{Type: "text"}); err != nil {
			return err
		}
		e.inText = true
	}
	b := append(e.buf[:0], `{"type":"content_block_delta","index":`...)
	b = strconv.AppendInt(b, int64(e.next-1), 10)
	b = append(b, `,"delta":{"type":"text_delta","text":`...)
	b = jsonx.AppendString(b, s)
	return e.emit("content_block_delta", append(b, "}}"...))
}

// ToolCall writes a whole tool_use block: start with empty input, the
// arguments as one input_json_delta, stop.
func (e *streamEncoder) ToolCall(tc chat.ToolCall) error {
	if e.inText {
		if err := e.blockStop(); err != nil {
			return err
		}
	}
	id := tc.ID
	if id == "" {
		id = newToolUseID()
	}
	e.calls++
	if err := e.blockStart(contentBlock{Type: "tool_use", ID: id, Name: tc.Name, Input: "{}"}); err != nil {
		return err
	}
	b := append(e.buf[:0], `{"type":"content_block_delta","index":`...)
	b = strconv.AppendInt(b, int64(e.next-1), 10)
	b = append(b, `,"delta":{"type":"input_json_delta","partial_json":`...)
	b = jsonx.AppendString(b, relay.ObjectArgs(tc.Arguments))
	if err := e.emit("content_block_delta", append(b, "}}"...)); err != nil {
		return err
	}
	return e.blockStop()
}

// Done closes the open block and writes message_delta and message_stop.
func (e *streamEncoder) Done(ev chat.Event) error {
	if e.next == 0 {
		// An empty answer still has one (empty) text block, as the
		// non-streaming message does.
		if err := e.blockStart(contentBlock{Type: "text"}); err != nil {
			return err
		}
		e.inText = true
	}
	if e.inText {
		if err := e.blockStop(); err != nil {
			return err
		}
	}
	reason := stopReason(ev.Finish, e.calls > 0)
	b := append(e.buf[:0], `{"type":"message_delta","delta":{"stop_reason":`...)
	b = jsonx.AppendString(b, reason)
	b = append(b, `,"stop_sequence":`...)
	if reason == "stop_sequence" {
		b = jsonx.AppendString(b, ev.StopSequence)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `},"usage":{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(ev.Usage.InputTokens), 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, int64(ev.Usage.OutputTokens), 10)
	if err := e.emit("message_delta", append(b, "}}"...)); err != nil {
		return err
	}
	return e.emit("message_stop", append(e.buf[:0], `{"type":"message_stop"}`...))
}

// Fail writes the in-stream error event; the relay then closes the stream.
func (e *streamEncoder) Fail(p *apierr.Problem) error {
	return e.emit("error", appendErrorBody(e.buf[:0], streamErrorType(p), p.Message))
}
