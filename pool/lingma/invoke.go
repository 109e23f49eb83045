package lingma

import (
	"bytes"
	"cmp"
	"encoding/json"
	"strconv"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/lingmarpc"
	"github.com/poolgate/poolgate/pool/textchat"
)

// invokeParams is a tool/invoke request: the plugin's ToolInvokeRequest
// (requestId, toolCallId, name, parameters, async) and a sessionId. The
// other spellings are read for a worker that passes the offered tools
// natively, whose side of the protocol no capture shows.
type invokeParams struct {
	RequestID  string          `json:"requestId"`
	SessionID  string          `json:"sessionId"`
	ToolCallID string          `json:"toolCallId"`
	ID         string          `json:"id"`
	Name       string          `json:"name"`
	ToolName   string          `json:"toolName"`
	Parameters json.RawMessage `json:"parameters"`
	Arguments  json.RawMessage `json:"arguments"`
	Input      json.RawMessage `json:"input"`
	Async      bool            `json:"async"`
}

// invokeResult is the plugin's ToolInvokeResponse: the answer to a
// synchronous tool/invoke, and the params of tool/invokeResult after an
// asynchronous one.
type invokeResult struct {
	RequestID     string `json:"requestId,omitempty"`
	ToolCallID    string `json:"toolCallId"`
	Name          string `json:"name"`
	Success       bool   `json:"success"`
	ErrorMessage  string `json:"errorMessage"`
	Result        any    `json:"result"`
	StartTime     int64  `json:"startTime"`
	TimeConsuming int64  `json:"timeConsuming"`
}

// invoke handles the worker's tool/invoke, on the reader goroutine. A call of
// a tool the turn offered natively is acknowledged and becomes one of the
// turn's tool calls, for the API caller to run. Any other is one of the
// worker's own tools (its agent loop reads files, runs commands): the
// gateway runs none on the worker's behalf and answers as the plugin
// answers a tool it does not support, with a result that says so.
func (c *Client) invoke(m *lingmarpc.Message) {
	var p invokeParams
	_ = json.Unmarshal(m.Params, &p) // unreadable params name no tool and are answered below
	name := cmp.Or(p.Name, p.ToolName)
	c.mu.Lock()
	t := c.turns[p.RequestID]
	c.mu.Unlock()
	if t == nil || !t.offered[name] {
		c.unsupported(m, &p, name, t)
		return
	}
	args, ok := textchat.NormalizeArgs(firstRaw(p.Parameters, p.Arguments, p.Input))
	if !ok {
		args = "{}"
		c.cfg.Logger.Warn("lingma: tool call arguments are not an object; sent as {}", "instance", c.name, "tool", name)
	}
	if len(m.ID) > 0 {
		_ = c.reply(m.ID)
	}
	call := chat.ToolCall{ID: cmp.Or(p.ToolCallID, p.ID), Name: name, Arguments: args}
	if call.ID == "" {
		call.ID = textchat.NewCallID()
	}
	t.Push(&chatParams{RequestID: p.RequestID, SessionID: p.SessionID, method: m.Method, call: &call})
}

// unsupported answers a tool/invoke of a tool the gateway does not run: in
// the reply when the call is synchronous, else an acknowledgement now and
// the result as a tool/invokeResult request. The turn notes that the
// worker ran its own tool loop (its session then holds more than the
// gateway sent).
func (c *Client) unsupported(m *lingmarpc.Message, p *invokeParams, name string, t *turn) {
	c.cfg.Logger.Info("lingma: the worker asked for one of its own tools; answered unsupported", "instance", c.name,
		"requestId", p.RequestID, "tool", name, "async", p.Async)
	if t != nil {
		t.builtins.Add(1)
	}
	if len(m.ID) == 0 {
		return
	}
	if !p.Async {
		_ = c.write(resultFrame(m.ID, UnsupportedResult("", cmp.Or(p.ToolCallID, p.ID), name)), c.cfg.CallTimeout)
		return
	}
	_ = c.reply(m.ID)
	res := UnsupportedResult(p.RequestID, cmp.Or(p.ToolCallID, p.ID), name)
	frame, err := requestFrame(c.nextID.Add(1), "tool/invokeResult", res)
	if err == nil {
		_ = c.write(frame, c.cfg.CallTimeout) // its answer goes nowhere: nothing waits for it
	}
}

// firstRaw is the first of raws that holds a value.
func firstRaw(raws ...json.RawMessage) json.RawMessage {
	for _, r := range raws {
		if r = bytes.TrimSpace(r); len(r) > 0 && string(r) != "null" {
			return r
		}
	}
	return nil
}

// UnsupportedResult is the driver's answer to a tool/invoke of a tool it
// does not run: the plugin's ToolInvokeResponse with success false. It is
// the reply to a synchronous call, and (with requestID set) the params of
// the tool/invokeResult that follows an asynchronous one.
func UnsupportedResult(requestID, toolCallID, name string) any {
	return invokeResult{RequestID: requestID, ToolCallID: toolCallID, Name: name, StartTime: time.Now().UnixMilli(),
		ErrorMessage: "tool " + strconv.Quote(name) + " is not supported by this client (poolgate runs no tool on the worker's machine)"}
}
