package modelserver

import (
	"bytes"
	"encoding/json"
	"net"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/openaiwire"
)

// maxPooledBuf is the largest request buffer put back in the pool (1 MiB);
// a rare huge transcript should not pin its buffer forever.
const maxPooledBuf = 1 << 20

// wireRequest is the body of POST /v1/chat/completions as the driver
// writes it.
type wireRequest = openaiwire.Request[openaiwire.TextMessage]

// Fixed values requests point at (never written through); a named
// tool_choice is built per request.
var (
	choiceNone     = json.RawMessage(`"none"`)
	choiceRequired = json.RawMessage(`"required"`)
	emptySchema    = json.RawMessage(`{"type":"object","properties":{}}`)
	schemaName     = json.RawMessage(`"answer"`)
	streamOn       = true
	streamOff      = false
)

// newWireRequest translates a turn into r, whose tool definitions go into
// defs (both reused from the payload, so a turn allocates neither). The
// result points into t, so it must be encoded before t changes.
func newWireRequest(t *chat.Turn, r *wireRequest, defs *[]openaiwire.ToolFunction) {
	*r = wireRequest{
		Model:       t.Model,
		Messages:    make([]openaiwire.TextMessage, len(t.Messages)),
		Stream:      &streamOff,
		Temperature: t.Temperature,
		TopP:        t.TopP,
	}
	if t.MaxTokens != 0 {
		r.MaxTokens = &t.MaxTokens
	}
	if !t.Whole {
		r.Stream = &streamOn
		r.StreamOptions = &openaiwire.StreamOptions{IncludeUsage: true}
	}
	if f := t.Format; f.JSON {
		r.ResponseFormat = &openaiwire.ResponseFormat{Type: "json_object"}
		if len(f.Schema) > 0 {
			r.ResponseFormat = &openaiwire.ResponseFormat{Type: "json_schema", JSONSchema: &openaiwire.JSONSchema{Name: schemaName, Schema: f.Schema}}
		}
	}
	for i := range t.Messages {
		m := &t.Messages[i]
		w := &r.Messages[i]
		*w = openaiwire.TextMessage{Role: m.Role, Content: &m.Content, ToolCallID: m.ToolCallID, Name: m.Name}
		if m.Role != chat.RoleTool {
			w.Name = "" // only tool results carry a name in the neutral model
		}
		if len(m.ToolCalls) == 0 {
			continue
		}
		if m.Content == "" {
			w.Content = nil
		}
		w.ToolCalls = make([]openaiwire.ToolCall, len(m.ToolCalls))
		for j, tc := range m.ToolCalls {
			args := tc.Arguments
			if args == "" {
				args = "{}"
			}
			w.ToolCalls[j] = openaiwire.ToolCall{ID: tc.ID, Type: "function", Function: openaiwire.Function{Name: tc.Name, Arguments: args}}
		}
	}
	if len(t.Tools) == 0 {
		return
	}
	r.Tools = make([]openaiwire.Tool, len(t.Tools))
	*defs = append((*defs)[:0], make([]openaiwire.ToolFunction, len(t.Tools))...)
	for i, tool := range t.Tools {
		params := tool.Parameters
		if len(params) == 0 {
			params = emptySchema // some servers' templates require a schema
		}
		(*defs)[i] = openaiwire.ToolFunction{Name: tool.Name, Description: tool.Description, Parameters: params}
		r.Tools[i] = openaiwire.Tool{Type: "function", Function: &(*defs)[i]}
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
}

// payload is one request: its encoded body and its head, in buffers pooled
// by the driver.
type payload struct {
	req  wireRequest
	defs []openaiwire.ToolFunction
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
	newWireRequest(t, &p.req, &p.defs)
	err := enc.Encode(&p.req)
	p.req = wireRequest{} // it points into t
	clear(p.defs)
	if err != nil {
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
