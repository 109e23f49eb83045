package responses

import (
	"bytes"
	"encoding/json"
	"strings"
)

// The Python gateway's Responses API was its chat completions underneath,
// and its clients learnt its ways; with python_compat (Config.PythonCompat)
// this protocol keeps them:
//
//   - a body's "output_text" joins the output's text (OpenAI's SDKs compute
//     it; its scripts read it from the JSON);
//   - a stream ends with "data: [DONE]" after its last event, and always
//     with response.completed: a turn that failed mid-stream ends with
//     response.completed whose status is "failed" and whose error says
//     why, where OpenAI's shape sends response.failed;
//   - a tool in the chat completions form ({"type": "function",
//     "function": {"name", ...}}) is taken as the function it defines;
//   - a function_call_output whose output is any other JSON (an object, a
//     list of anything) is taken as that JSON's text.
//
// Without python_compat the last two are 400s that say so.

// doneSentinel is the data of the Python gateway's last stream event.
var doneSentinel = []byte("[DONE]")

// chatFunction is a chat completions tool's function.
type chatFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// chatStyleTool takes a chat completions tool as the function it defines
// (compat), or refuses it naming the Responses form.
func chatStyleTool(param string, t *wireTool, compat bool) error {
	if t.Function == nil || t.Type != "function" || t.Name != "" {
		return nil
	}
	if !compat {
		return badParam(param, param+` is a chat completions tool ({"type": "function", "function": {...}}); the Responses API takes `+
			`{"type": "function", "name", "description", "parameters"} (python_compat takes the chat form, as the Python gateway did)`)
	}
	t.Name, t.Description, t.Parameters = t.Function.Name, t.Function.Description, t.Function.Parameters
	return nil
}

// compatOutput is a tool output that is neither a string nor a list of
// content parts, as its JSON text, with compat; ok false leaves it to the
// parts' decoding (and its errors).
func (ic *inputContext) compatOutput(raw json.RawMessage) (string, bool) {
	if !ic.compat {
		return "", false
	}
	var parts []contentPart
	if json.Unmarshal(raw, &parts) == nil && !hasUntyped(parts) {
		return "", false
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return "", false
	}
	return b.String(), true
}

func hasUntyped(parts []contentPart) bool {
	for _, p := range parts {
		if p.Type == "" {
			return true
		}
	}
	return false
}

// compatOutputText sets output_text from the output so far, with compat.
func (e *streamEncoder) compatOutputText() {
	if !e.compat {
		return
	}
	var text strings.Builder
	for i := range e.resp.Output {
		if it := &e.resp.Output[i]; it.Type == "message" {
			text.WriteString(strings.Join(it.Parts, ""))
		}
	}
	s := text.String()
	e.resp.OutputText = &s
}

// failedEvent names the last event of a failed stream.
func (e *streamEncoder) failedEvent() string {
	if e.compat {
		return "response.completed"
	}
	return "response.failed"
}

// compatDone writes the closing data: [DONE] after the last event, with
// compat, unless that event could not be written.
func (e *streamEncoder) compatDone(err error) error {
	if err != nil || !e.compat {
		return err
	}
	return e.w.Event("", doneSentinel)
}
