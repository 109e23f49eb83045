package responses

import (
	"encoding/json"
	"strings"

	"github.com/poolgate/poolgate/internal/jsonx"
)

// Shapes are another gateway's ways with the Responses API, which its
// clients count on: the forms of a request it took that OpenAI's API
// refuses, and how its streams ended. The wiring gives internal/pycompat's
// (the Python gateway's); nil: OpenAI's ways alone.
type Shapes interface {
	// ChatTool takes the function of a tool in chat completions' form
	// ({"type": "function", "function": {...}}) as the function tool it
	// defines; an error refuses it, told about param.
	ChatTool(param string, function json.RawMessage) (name, description string, parameters json.RawMessage, err error)
	// Output takes a function call's output that is neither a string nor
	// content parts as its text (ok); when it does not, hint is added to
	// the refusal.
	Output(raw json.RawMessage) (text string, ok bool, hint string)
	// Ending says how a stream ends: the name of the last event of one that
	// failed, whether the response carries output_text (its output's
	// text), and the data of one more event after the last (nil: none).
	Ending() (failed string, outputText bool, trailer []byte)
}

// chatStyleTool takes a chat completions tool as the function it defines
// (Shapes.ChatTool), or refuses it naming the Responses form.
func chatStyleTool(param string, t *wireTool, s Shapes) error {
	if jsonx.IsNull(t.Function) || t.Type != "function" || t.Name != "" {
		return nil
	}
	if s == nil {
		return badParam(param, param+` is a chat completions tool ({"type": "function", "function": {...}}); the Responses API takes `+
			`{"type": "function", "name", "description", "parameters"}`)
	}
	var err error
	if t.Name, t.Description, t.Parameters, err = s.ChatTool(param, t.Function); err != nil {
		return badParam(param, err.Error())
	}
	return nil
}

// ending is how a stream ends (Shapes.Ending).
type ending struct {
	failed     string // the last event of a failed stream
	outputText bool
	trailer    []byte
}

func endingOf(s Shapes) ending {
	if s == nil {
		return ending{failed: "response.failed"}
	}
	failed, outputText, trailer := s.Ending()
	return ending{failed, outputText, trailer}
}

// setOutputText sets output_text from the output so far, when the ending
// asks for it.
func (e *streamEncoder) setOutputText() {
	if !e.end.outputText {
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

// trail writes the ending's trailer after the last event, unless that event
// could not be written.
func (e *streamEncoder) trail(err error) error {
	if err != nil || e.end.trailer == nil {
		return err
	}
	return e.w.Event("", e.end.trailer)
}
