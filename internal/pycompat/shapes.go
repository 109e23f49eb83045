package pycompat

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/poolgate/poolgate/internal/jsonx"
)

// Shapes are the Python gateway's ways with the answer APIs, which its
// clients learnt: the protocols table takes them (handlers/protocols'
// Compat), and with Enabled false (python_compat off) they keep OpenAI's and
// Anthropic's ways and only name python_compat in the refusals of the
// forms it would take.
//
// With python_compat on:
//   - a turn on an account that is not logged in is a 401 (its scripts
//     start a login on it), where poolgate says 503, a gateway's problem
//     that clients retry (Status);
//   - a non-stream chat completion carries "served_by" (the instance) and
//     "latency" ({first_token_ms, total_ms}) (Completion);
//   - Responses: a body's "output_text" joins the output's text (OpenAI's
//     SDKs compute it; its scripts read it from the JSON); a stream ends
//     with "data: [DONE]" after its last event, and always with
//     response.completed: a turn that failed mid-stream ends with
//     response.completed whose status is "failed" and whose error says
//     why, where OpenAI's shape sends response.failed (Ending); a tool in
//     the chat completions form ({"type": "function", "function": {"name",
//     ...}}) is taken as the function it defines (ChatTool); a
//     function_call_output whose output is any other JSON (an object, a
//     list of anything) is taken as that JSON's text (Output). That
//     gateway's Responses API was its chat completions underneath.
type Shapes struct {
	Enabled bool
}

// On says python_compat is on.
func (s Shapes) On() bool { return s.Enabled }

// Status is a 401 for a logged-out account's not_logged_in, with Enabled.
func (s Shapes) Status(code string, status int) int {
	if s.Enabled && code == "not_logged_in" {
		return 401
	}
	return status
}

// Completion adds served_by and latency to a non-stream completion's body,
// with Enabled.
func (s Shapes) Completion(body []byte, instance string, firstMS, totalMS int64) []byte {
	if !s.Enabled || len(body) == 0 || body[len(body)-1] != '}' {
		return body
	}
	b := append(body[:len(body)-1:len(body)-1], `,"served_by":`...)
	b = jsonx.AppendString(b, instance)
	b = append(b, `,"latency":{"first_token_ms":`...)
	b = strconv.AppendInt(b, firstMS, 10)
	b = append(b, `,"total_ms":`...)
	b = strconv.AppendInt(b, totalMS, 10)
	return append(b, "}}"...)
}

// chatFunction is a chat completions tool's function.
type chatFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// ChatTool takes a chat completions tool as the function it defines, with
// Enabled; without, it refuses it naming the Responses form and python_compat.
func (s Shapes) ChatTool(param string, function json.RawMessage) (string, string, json.RawMessage, error) {
	if !s.Enabled {
		return "", "", nil, errors.New(param + ` is a chat completions tool ({"type": "function", "function": {...}}); the Responses API takes ` +
			`{"type": "function", "name", "description", "parameters"} (python_compat takes the chat form, as the Python gateway did)`)
	}
	var f chatFunction
	if err := json.Unmarshal(function, &f); err != nil {
		return "", "", nil, errors.New(param + " must be a tool object")
	}
	return f.Name, f.Description, f.Parameters, nil
}

// Output takes a tool output that is neither a string nor a list of typed
// content parts as its JSON text, with Enabled.
func (s Shapes) Output(raw json.RawMessage) (string, bool, string) {
	const hint = " (python_compat takes any JSON there, as the Python gateway did, and passes it on as its text)"
	if !s.Enabled {
		return "", false, hint
	}
	var parts []contentPart
	if json.Unmarshal(raw, &parts) == nil && !untyped(parts) {
		return "", false, hint
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return "", false, hint
	}
	return b.String(), true, ""
}

// contentPart is a Responses content part, as handlers/responses reads it.
type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func untyped(parts []contentPart) bool {
	for _, p := range parts {
		if p.Type == "" {
			return true
		}
	}
	return false
}

// Ending ends a stream with response.completed, output_text and a closing
// data: [DONE], with Enabled; OpenAI's ending without.
func (s Shapes) Ending() (failed string, outputText bool, trailer []byte) {
	if !s.Enabled {
		return "response.failed", false, nil
	}
	return "response.completed", true, []byte("[DONE]")
}
