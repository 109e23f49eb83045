package modelserver

import (
	"bytes"
	"encoding/json"
	"net"

	"github.com/poolgate/poolgate/internal/chat"
)

// maxPooledBuf is the largest request buffer put back in the pool (1 MiB);
// a rare huge transcript should not pin its buffer forever.
const maxPooledBuf = 1 << 20

// wireRequest is the body of POST /v1/chat/completions.
type wireRequest struct {
	Model         string          `json:"model,omitempty"`
	Messages      []wireMessage   `json:"messages"`
	Stream        bool            `json:"stream"`
	StreamOptions *streamOptions  `json:"stream_options,omitempty"`
	Tools         []wireTool      `json:"tools,omitempty"`
	ToolChoice    json.RawMessage `json:"tool_choice,omitempty"`
	MaxTokens     int             `json:"max_tokens,omitempty"`
	Temperature   *float64        `json:"temperature,omitempty"`
	TopP          *float64        `json:"top_p,omitempty"`
	// ResponseFormat asks for a JSON answer (chat.Format).
	ResponseFormat *responseFormat `json:"response_format,omitempty"`
}

// responseFormat is OpenAI's response_format: json_object, or a non-strict
// json_schema when the turn names a schema (a hint, as the caller's was).
type responseFormat struct {
	Type       string          `json:"type"`
	JSONSchema *jsonSchemaSpec `json:"json_schema,omitempty"`
}

type jsonSchemaSpec struct {
	Name   string          `json:"name"`
	Schema json.RawMessage `json:"schema"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type wireMessage struct {
	Role string `json:"role"`
	// Content is null on an assistant turn that only calls tools.
	Content    *string        `json:"content"`
	ToolCalls  []wireToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
	Name       string         `json:"name,omitempty"`
}

type wireToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function wireFunction `json:"function"`
}

type wireFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type wireTool struct {
	Type     string      `json:"type"`
	Function wireToolDef `json:"function"`
}

type wireToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

// Fixed tool_choice values; a named choice is built per request.
var (
	choiceNone     = json.RawMessage(`"none"`)
	choiceRequired = json.RawMessage(`"required"`)
	emptySchema    = json.RawMessage(`{"type":"object","properties":{}}`)
)

// newWireRequest translates a turn. The result points into t, so it must be
// encoded before t changes.
func newWireRequest(t *chat.Turn) *wireRequest {
	r := &wireRequest{
		Model:       t.Model,
		Messages:    make([]wireMessage, len(t.Messages)),
		Stream:      !t.Whole,
		MaxTokens:   t.MaxTokens,
		Temperature: t.Temperature,
		TopP:        t.TopP,
	}
	if r.Stream {
		r.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	if f := t.Format; f.JSON {
		r.ResponseFormat = &responseFormat{Type: "json_object"}
		if len(f.Schema) > 0 {
			r.ResponseFormat = &responseFormat{Type: "json_schema", JSONSchema: &jsonSchemaSpec{Name: "answer", Schema: f.Schema}}
		}
	}
	for i := range t.Messages {
		m := &t.Messages[i]
		w := &r.Messages[i]
		*w = wireMessage{Role: m.Role, Content: &m.Content, ToolCallID: m.ToolCallID, Name: m.Name}
		if m.Role != chat.RoleTool {
			w.Name = "" // only tool results carry a name in the neutral model
		}
		if len(m.ToolCalls) == 0 {
			continue
		}
		if m.Content == "" {
			w.Content = nil
		}
		w.ToolCalls = make([]wireToolCall, len(m.ToolCalls))
		for j, tc := range m.ToolCalls {
			args := tc.Arguments
			if args == "" {
				args = "{}"
			}
			w.ToolCalls[j] = wireToolCall{ID: tc.ID, Type: "function", Function: wireFunction{Name: tc.Name, Arguments: args}}
		}
	}
	if len(t.Tools) == 0 {
		return r
	}
	r.Tools = make([]wireTool, len(t.Tools))
	for i, tool := range t.Tools {
		params := tool.Parameters
		if len(params) == 0 {
			params = emptySchema // some servers' templates require a schema
		}
		r.Tools[i] = wireTool{Type: "function", Function: wireToolDef{Name: tool.Name, Description: tool.Description, Parameters: params}}
	}
	switch t.ToolChoice.Mode {
	case chat.ToolNone:
		r.ToolChoice = choiceNone
	case chat.ToolRequired:
		r.ToolChoice = choiceRequired
	case chat.ToolNamed:
		named, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": t.ToolChoice.Name}})
		r.ToolChoice = named
	}
	return r
}

// payload is one request: its encoded body and its head, in buffers pooled
// by the driver.
type payload struct {
	buf  bytes.Buffer
	head []byte
	vec  [2][]byte
	bufs net.Buffers
}

// encode renders t into a pooled payload whose head is head plus the
// body's length; release returns it.
func (d *Driver) encode(t *chat.Turn, head []byte) (*payload, error) {
	p := d.payloads.Get().(*payload)
	p.buf.Reset()
	enc := json.NewEncoder(&p.buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(newWireRequest(t)); err != nil {
		d.release(p)
		return nil, err
	}
	p.head = appendLength(append(p.head[:0], head...), p.buf.Len())
	return p, nil
}

// wire returns the request's head and body, for one vectored write.
func (p *payload) wire() *net.Buffers {
	p.vec = [2][]byte{p.head, p.buf.Bytes()}
	p.bufs = p.vec[:]
	return &p.bufs
}

// release puts p back in the pool, unless a rare huge transcript grew it.
func (d *Driver) release(p *payload) {
	p.vec, p.bufs = [2][]byte{}, nil
	if p.buf.Cap() <= maxPooledBuf {
		d.payloads.Put(p)
	}
}
