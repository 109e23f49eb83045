package responses

import (
	"crypto/rand"
	"encoding/json"
	mrand "math/rand/v2"
	"strconv"
	"strings"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/jsonx"
)

// item is one input or output item. Its JSON tags are the compact form kept
// in the store; wire renders it the way the Responses API shows it.
type item struct {
	ID string `json:"id"`
	// Type is message, function_call, function_call_output,
	// custom_tool_call or custom_tool_call_output.
	Type      string   `json:"type"`
	Status    string   `json:"status,omitempty"`
	Role      string   `json:"role,omitempty"`
	Parts     []string `json:"parts,omitempty"`
	CallID    string   `json:"call_id,omitempty"`
	Name      string   `json:"name,omitempty"`
	Namespace string   `json:"namespace,omitempty"`
	Arguments string   `json:"arguments,omitempty"`
	Input     string   `json:"input,omitempty"`
	Output    string   `json:"output,omitempty"`
}

// wireItem marshals an item in its API shape.
type wireItem item

// MarshalJSON writes the API shape of the item.
func (it wireItem) MarshalJSON() ([]byte, error) {
	return (*item)(&it).wire(make([]byte, 0, 128)), nil
}

// wire appends the API shape. Assistant text is output_text (with the
// annotations and logprobs arrays clients index into); other roles' text is
// input_text.
func (it *item) wire(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = jsonx.AppendString(b, it.ID)
	b = append(b, `,"type":`...)
	b = jsonx.AppendString(b, it.Type)
	b = append(b, `,"status":`...)
	b = jsonx.AppendString(b, it.Status)
	switch it.Type {
	case "message":
		b = append(b, `,"role":`...)
		b = jsonx.AppendString(b, it.Role)
		b = append(b, `,"content":[`...)
		for i, p := range it.Parts {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendPart(b, it.Role, p)
		}
		b = append(b, ']')
	case "function_call", "custom_tool_call":
		b = append(b, `,"call_id":`...)
		b = jsonx.AppendString(b, it.CallID)
		if it.Namespace != "" {
			b = append(b, `,"namespace":`...)
			b = jsonx.AppendString(b, it.Namespace)
		}
		b = append(b, `,"name":`...)
		b = jsonx.AppendString(b, it.Name)
		if it.Type == "custom_tool_call" {
			b = append(b, `,"input":`...)
			b = jsonx.AppendString(b, it.Input)
			break
		}
		b = append(b, `,"arguments":`...)
		b = jsonx.AppendString(b, it.Arguments)
	case "function_call_output", "custom_tool_call_output":
		b = append(b, `,"call_id":`...)
		b = jsonx.AppendString(b, it.CallID)
		b = append(b, `,"output":`...)
		b = jsonx.AppendString(b, it.Output)
	}
	return append(b, '}')
}

func appendPart(b []byte, role, text string) []byte {
	if role == chat.RoleAssistant {
		b = append(b, `{"type":"output_text","text":`...)
		b = jsonx.AppendString(b, text)
		return append(b, `,"annotations":[],"logprobs":[]}`...)
	}
	b = append(b, `{"type":"input_text","text":`...)
	b = jsonx.AppendString(b, text)
	return append(b, '}')
}

// responseObject is the Responses API's response object.
type responseObject struct {
	ID                 string             `json:"id"`
	Object             string             `json:"object"`
	CreatedAt          int64              `json:"created_at"`
	Status             string             `json:"status"`
	Background         bool               `json:"background"`
	Error              *responseError     `json:"error"`
	IncompleteDetails  *incompleteDetails `json:"incomplete_details"`
	Instructions       *string            `json:"instructions"`
	MaxOutputTokens    *int               `json:"max_output_tokens"`
	Model              string             `json:"model"`
	Output             []wireItem         `json:"output"`
	ParallelToolCalls  bool               `json:"parallel_tool_calls"`
	PreviousResponseID *string            `json:"previous_response_id"`
	Reasoning          reasoning          `json:"reasoning"`
	Store              bool               `json:"store"`
	Temperature        float64            `json:"temperature"`
	Text               json.RawMessage    `json:"text"`
	ToolChoice         json.RawMessage    `json:"tool_choice"`
	Tools              []json.RawMessage  `json:"tools"`
	TopP               float64            `json:"top_p"`
	Truncation         string             `json:"truncation"`
	Usage              *usage             `json:"usage"`
	User               *string            `json:"user"`
	Metadata           map[string]string  `json:"metadata"`
	// OutputText joins the output's text, as the Python gateway's bodies
	// had it (Shapes.Ending asks for it: OpenAI's SDKs compute it themselves).
	OutputText *string `json:"output_text,omitempty"`
}

type responseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type incompleteDetails struct {
	Reason string `json:"reason"`
}

type reasoning struct {
	Effort  *string `json:"effort"`
	Summary *string `json:"summary"`
}

type usage struct {
	InputTokens         int          `json:"input_tokens"`
	InputTokensDetails  cachedTokens `json:"input_tokens_details"`
	OutputTokens        int          `json:"output_tokens"`
	OutputTokensDetails reasonTokens `json:"output_tokens_details"`
	TotalTokens         int          `json:"total_tokens"`
}

type cachedTokens struct {
	CachedTokens int `json:"cached_tokens"`
}

type reasonTokens struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

var (
	textFormatText = json.RawMessage(`{"format":{"type":"text"}}`)
	toolChoiceAuto = json.RawMessage(`"auto"`)
)

// newResponseID returns an unguessable response id: ids are the only key to
// a stored conversation (besides the owner check).
func newResponseID() string { return "resp_" + strings.ToLower(rand.Text()) }

// newID returns an item id. Item ids only need to be unique, so they come
// from the cheap per-process generator rather than crypto/rand.
func newID(prefix string) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	var b [40]byte
	n := copy(b[:], prefix)
	hi, lo := mrand.Uint64(), mrand.Uint64()
	for i := 0; i < 26; i++ {
		b[n+i] = alphabet[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(b[:n+26])
}

// newResponse fills the request echo of a response object (status
// in_progress, no output yet).
func newResponse(d *decoded, model, prev string, now int64) *responseObject {
	in := &d.wire
	r := &responseObject{
		ID: newResponseID(), Object: "response", CreatedAt: now, Status: "in_progress",
		Instructions: in.Instructions, MaxOutputTokens: in.MaxOutputTokens, Model: model,
		Output: []wireItem{}, ParallelToolCalls: in.ParallelToolCalls == nil || *in.ParallelToolCalls,
		Store: in.Store == nil || *in.Store, Temperature: 1, TopP: 1, Text: textFormatText,
		ToolChoice: toolChoiceAuto, Tools: in.Tools, Truncation: "disabled", Metadata: in.Metadata,
	}
	if r.Tools == nil {
		r.Tools = []json.RawMessage{}
	}
	if r.Metadata == nil {
		r.Metadata = map[string]string{}
	}
	if prev != "" {
		r.PreviousResponseID = &prev
	}
	if in.Temperature != nil {
		r.Temperature = *in.Temperature
	}
	if in.TopP != nil {
		r.TopP = *in.TopP
	}
	if !jsonx.IsNull(in.ToolChoice) {
		r.ToolChoice = in.ToolChoice
	}
	if in.Truncation != "" {
		r.Truncation = in.Truncation
	}
	if in.User != "" {
		r.User = &in.User
	}
	return r
}

// builder folds neutral events into a response's output. The open message
// is not yet in resp.Output; its output index is len(resp.Output).
type builder struct {
	resp    *responseObject
	refs    toolRefs
	msgID   string
	msgOpen bool
	text    []byte
}

// openMessage starts the assistant message that text goes into.
func (b *builder) openMessage() {
	b.msgOpen = true
	b.msgID = newID("msg_")
	b.text = b.text[:0]
}

// closeMessage moves the open message into the output.
func (b *builder) closeMessage(status string) *item {
	b.msgOpen = false
	b.resp.Output = append(b.resp.Output, wireItem{ID: b.msgID, Type: "message", Status: status,
		Role: chat.RoleAssistant, Parts: []string{string(b.text)}})
	return (*item)(&b.resp.Output[len(b.resp.Output)-1])
}

// addCall appends the item of a worker's call, in the client's terms: a
// namespaced function carries its namespace, a custom tool's call is a
// custom_tool_call with its free-form input.
func (b *builder) addCall(tc *chat.ToolCall) *item {
	callID := tc.ID
	if callID == "" {
		callID = newID("call_")
	}
	ref, input := b.refs.call(tc)
	it := wireItem{Status: "completed", CallID: callID, Name: ref.name, Namespace: ref.namespace}
	if ref.custom {
		it.ID, it.Type, it.Input = newID("ctc_"), "custom_tool_call", input
	} else {
		it.ID, it.Type, it.Arguments = newID("fc_"), "function_call", tc.Arguments
		if it.Arguments == "" {
			it.Arguments = "{}"
		}
	}
	b.resp.Output = append(b.resp.Output, it)
	return (*item)(&b.resp.Output[len(b.resp.Output)-1])
}

// finish sets the final status and usage from the closing event.
func (b *builder) finish(ev *chat.Event) {
	r := b.resp
	r.Status = "completed"
	if ev.Finish == chat.FinishLength {
		r.Status = "incomplete"
		r.IncompleteDetails = &incompleteDetails{Reason: "max_output_tokens"}
	}
	r.Usage = &usage{InputTokens: ev.Usage.InputTokens, OutputTokens: ev.Usage.OutputTokens,
		TotalTokens: ev.Usage.InputTokens + ev.Usage.OutputTokens}
}

// fail marks the response failed with p.
func (b *builder) fail(p *apierr.Problem) {
	b.resp.Status = "failed"
	b.resp.Error = &responseError{Code: failCode(p), Message: p.Message}
}

// answer is the assistant turn for the stored transcript.
func (b *builder) answer() chat.Message {
	m := chat.Message{Role: chat.RoleAssistant}
	for i := range b.resp.Output {
		it := &b.resp.Output[i]
		switch it.Type {
		case "message":
			m.Content += strings.Join(it.Parts, "")
		case "function_call":
			m.ToolCalls = append(m.ToolCalls, chat.ToolCall{ID: it.CallID, Name: flatName(it.Namespace, it.Name), Arguments: it.Arguments})
		case "custom_tool_call":
			m.ToolCalls = append(m.ToolCalls, chat.ToolCall{ID: it.CallID, Name: flatName(it.Namespace, it.Name), Arguments: customArguments(it.Input)})
		}
	}
	return m
}

func appendInt(b []byte, n int) []byte { return strconv.AppendInt(b, int64(n), 10) }
