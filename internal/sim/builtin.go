package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/poolgate/poolgate/internal/lingmarpc"
)

// builtin is one of the worker's own tools a turn asks the client to run.
// In agent mode the real worker runs its own tool loop and asks the IDE to
// run its built-in tools (read_file, run_in_terminal, ...) with tool/invoke;
// the simulator does it when a directive or --builtin-tool asks.
type builtin struct {
	name  string
	async bool
}

// invokeResponse is what the client answers a tool/invoke with: the
// plugin's ToolInvokeResponse. An unsupported tool is a response with
// success false, never a JSON-RPC error.
type invokeResponse struct {
	ToolCallID   string          `json:"toolCallId"`
	Name         string          `json:"name"`
	Success      *bool           `json:"success"`
	ErrorMessage string          `json:"errorMessage"`
	Result       json.RawMessage `json:"result"`
}

// errToolAnswer is a tool/invoke the client answered the way the plugin
// never does: the real worker's reaction is not known, so the simulator
// fails the turn, which shows.
var errToolAnswer = errors.New("the client's answer to tool/invoke is not a tool result")

// builtins runs the turn's built-in tool calls, each a round trip with the
// client, and returns a line per call saying how it went, for the answer.
func (c *conn) builtins(ctx context.Context, t *turn) (string, error) {
	calls := t.d.builtins
	if len(calls) == 0 && c.s.cfg.BuiltinTool != "" {
		calls = []builtin{{name: c.s.cfg.BuiltinTool, async: c.s.cfg.BuiltinAsync}}
	}
	if t.mode != "agent" || len(calls) == 0 {
		return "", nil
	}
	notes := make([]string, 0, len(calls))
	for i, b := range calls {
		inv := toolInvoke{RequestID: t.reqID, SessionID: t.sid, Name: b.name, Async: b.async,
			ToolCallID: "tool_sim_" + strconv.Itoa(t.n) + "_" + strconv.Itoa(i), Parameters: map[string]any{"filePath": "README.md"}}
		c.s.builtinCalls.Add(1)
		res, err := c.invoke(ctx, inv)
		if err != nil {
			return "", fmt.Errorf("tool %s: %w", b.name, err)
		}
		if *res.Success {
			notes = append(notes, fmt.Sprintf("tool %s returned: %s", b.name, res.Result))
		} else {
			notes = append(notes, fmt.Sprintf("tool %s failed: %s", b.name, res.ErrorMessage))
		}
	}
	return strings.Join(notes, "\n"), nil
}

// invoke sends one tool/invoke and waits for its result: in the reply
// when the call is synchronous; else the reply is an acknowledgement and the
// result comes as a tool/invokeResult request, within the reply timeout.
func (c *conn) invoke(ctx context.Context, inv toolInvoke) (*invokeResponse, error) {
	var wait chan *invokeResponse
	if inv.Async {
		wait = make(chan *invokeResponse, 1)
		c.mu.Lock()
		c.invokes[inv.ToolCallID] = wait
		c.mu.Unlock()
		defer func() {
			c.mu.Lock()
			delete(c.invokes, inv.ToolCallID)
			c.mu.Unlock()
		}()
	}
	m, err := c.callResult(ctx, "tool/invoke", c.s.invokeBody(inv))
	if err != nil {
		return nil, err
	}
	if m.Error != nil {
		return nil, fmt.Errorf("%w: JSON-RPC error %d %q", errToolAnswer, m.Error.Code, m.Error.Message)
	}
	if !inv.Async {
		return readInvokeResponse(m.Result)
	}
	return awaitReply(ctx, wait, c.s.cfg.ReplyTimeout, "tool/invokeResult for "+inv.ToolCallID)
}

// readInvokeResponse reads a tool result, which must say whether it
// succeeded.
func readInvokeResponse(raw json.RawMessage) (*invokeResponse, error) {
	var res invokeResponse
	if err := json.Unmarshal(raw, &res); err != nil || res.Success == nil {
		return nil, fmt.Errorf("%w: %s", errToolAnswer, raw)
	}
	return &res, nil
}

// invokeResult answers the client's tool/invokeResult: the result of an
// asynchronous tool/invoke goes to the turn waiting for it.
func (c *conn) invokeResult(m *lingmarpc.Message) {
	res, err := readInvokeResponse(m.Params)
	if err != nil {
		c.respond(m.ID, map[string]any{"errorCode": "INVALID_PARAMS", "errorMessage": err.Error()}, nil)
		return
	}
	c.mu.Lock()
	wait := c.invokes[res.ToolCallID]
	delete(c.invokes, res.ToolCallID)
	c.mu.Unlock()
	if wait == nil {
		c.respond(m.ID, map[string]any{"errorCode": "NOT_FOUND", "errorMessage": "no tool call " + res.ToolCallID + " is waiting"}, nil)
		return
	}
	wait <- res
	c.respond(m.ID, map[string]any{"errorCode": nil, "errorMessage": nil}, nil)
}

// toolFailed ends a turn whose built-in tool call failed: a client that
// never answered leaves it unfinished, as a silent client does; an answer
// of the wrong kind fails it with a server error.
func (c *conn) toolFailed(ctx context.Context, t *turn, fin finishParams, err error) {
	if !errors.Is(err, errToolAnswer) {
		c.abort(t, fin, "", err)
		return
	}
	c.log.Warn("tool/invoke answered with something other than a tool result", "requestId", t.reqID, "err", err)
	fin.Reason, fin.StatusCode, fin.ErrorMessage = reasonError, statusFailed, err.Error()
	c.end(ctx, t, fin)
}
