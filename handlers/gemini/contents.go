package gemini

import (
	"bytes"
	"cmp"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/jsonx"
)

// Notes that stand in for data the text-only workers cannot see, so the
// conversation reads on and the model knows something was there.
const (
	inlineDataNote = "[inline data omitted: the model cannot see images, audio or files]"
	fileDataNote   = "[file omitted: the model cannot read attached files]"
)

// systemText flattens systemInstruction to its text.
func systemText(c *wireContent) (string, error) {
	var t joiner
	for j := range c.Parts {
		p := &c.Parts[j]
		p.merge()
		if p.Text == nil || p.FunctionCall != nil || p.FunctionResponse != nil || !jsonx.IsNull(p.InlineData) || !jsonx.IsNull(p.FileData) {
			return "", apierr.BadRequest("systemInstruction.parts[%d]: only text parts are supported", j)
		}
		t.add(*p.Text, "\n\n")
	}
	return t.String(), nil
}

// contents translates the conversation.
type contents struct {
	dropped *httpx.Dropped
	// current is the index of the last user content, the turn the answer
	// depends on.
	current int
	// calls counts the function calls so far: a call without an id gets
	// one from its place, the same on every turn of the conversation.
	calls int
	// pending holds, by function name, the ids of calls not yet answered:
	// a response without an id answers the oldest call of its name.
	pending map[string][]string
	// answered holds each call's response text, to notice one sent twice.
	answered map[string]string
}

// decodeContents appends the messages of in to dst.
func decodeContents(dst []chat.Message, in []wireContent, dropped *httpx.Dropped) ([]chat.Message, error) {
	if len(in) == 0 {
		return nil, apierr.BadRequest("contents: at least one content is required")
	}
	cs := contents{dropped: dropped, current: -1, pending: map[string][]string{}, answered: map[string]string{}}
	for i := range in {
		if in[i].Role != "model" {
			cs.current = i
		}
	}
	if in[len(in)-1].Role == "model" {
		return nil, apierr.BadRequest("contents[%d]: a final model content (prefill) is not supported by this gateway", len(in)-1)
	}
	var err error
	for i := range in {
		if dst, err = cs.appendContent(dst, i, &in[i]); err != nil {
			return nil, err
		}
	}
	return dst, nil
}

// appendContent translates one content. A user content's function
// responses become RoleTool messages ahead of its text, the order the
// neutral transcript (and every worker) expects. A model content's text
// parts are the pieces of one answer and are joined as they are; a user
// content's parts are separate pieces of input, kept apart by a blank line.
func (cs *contents) appendContent(dst []chat.Message, i int, c *wireContent) ([]chat.Message, error) {
	role, sep := chat.RoleUser, "\n\n"
	switch c.Role {
	case "", "user", "function":
	case "model":
		role, sep = chat.RoleAssistant, ""
	default:
		return nil, apierr.BadRequest("contents[%d].role: must be \"user\" or \"model\", got %q", i, c.Role)
	}
	msg := chat.Message{Role: role}
	var text joiner
	media, words, results := 0, 0, 0
	for j := range c.Parts {
		p := &c.Parts[j]
		p.merge()
		if p.ThoughtSignature != "" {
			cs.dropped.Add(dropThoughtSignature)
		}
		switch {
		case p.Thought:
			// Reasoning of earlier turns: the workers neither make nor read it.
			cs.dropped.Add(dropThoughts)
		case p.Text != nil:
			text.add(*p.Text, sep)
			if strings.TrimSpace(*p.Text) != "" {
				words++
			}
		case p.FunctionCall != nil:
			if role != chat.RoleAssistant {
				return nil, apierr.BadRequest("contents[%d].parts[%d]: functionCall parts belong in model contents", i, j)
			}
			tc, err := cs.call(p.FunctionCall, i, j)
			if err != nil {
				return nil, err
			}
			msg.ToolCalls = append(msg.ToolCalls, tc)
		case p.FunctionResponse != nil:
			if role != chat.RoleUser {
				return nil, apierr.BadRequest("contents[%d].parts[%d]: functionResponse parts belong in user contents", i, j)
			}
			res, repeated := cs.result(p.FunctionResponse)
			if repeated {
				cs.dropped.Add(dropRepeatedResult)
				continue
			}
			dst = append(dst, res)
			results++
		default:
			note, err := cs.other(p, i, j)
			if err != nil {
				return nil, err
			}
			if note != "" {
				text.add(note, "\n\n")
				media++
			}
		}
	}
	if i == cs.current && media > 0 && words == 0 && results == 0 {
		// Answering would mean pretending to have seen it.
		return nil, apierr.BadRequest("contents[%d]: this turn is only inline data or files, which the workers cannot read (they are text-only)", i)
	}
	msg.Content = text.String()
	if msg.Content == "" && len(msg.ToolCalls) == 0 {
		return dst, nil // a user turn made only of function responses
	}
	return append(dst, msg), nil
}

// other translates a part that is neither text nor a function: the data
// the workers cannot see, as a note, and the code Google's servers ran,
// dropped.
func (cs *contents) other(p *wirePart, i, j int) (string, error) {
	switch {
	case !jsonx.IsNull(p.InlineData):
		cs.dropped.Add(dropInlineData)
		return inlineDataNote, nil
	case !jsonx.IsNull(p.FileData):
		cs.dropped.Add(dropFileData)
		return fileDataNote, nil
	case !jsonx.IsNull(p.ExecutableCode), !jsonx.IsNull(p.CodeExecutionResult):
		cs.dropped.Add(dropCodeExecution)
		return "", nil
	case p.ThoughtSignature != "":
		return "", nil // a signature alone: dropped above
	}
	return "", apierr.BadRequest("contents[%d].parts[%d]: the part has no data this gateway supports (text, functionCall, functionResponse, inlineData, fileData)", i, j)
}

// call translates a model's function call; one without an id gets one.
func (cs *contents) call(fc *functionCall, i, j int) (chat.ToolCall, error) {
	if fc.Name == "" {
		return chat.ToolCall{}, apierr.BadRequest("contents[%d].parts[%d].functionCall.name: field required", i, j)
	}
	args := "{}"
	if !jsonx.IsNull(fc.Args) {
		if a := bytes.TrimSpace(fc.Args); a[0] != '{' {
			return chat.ToolCall{}, apierr.BadRequest("contents[%d].parts[%d].functionCall.args: must be an object", i, j)
		}
		args = string(fc.Args)
	}
	cs.calls++
	id := fc.ID
	if id == "" {
		id = "call_" + strconv.Itoa(cs.calls)
	}
	cs.pending[fc.Name] = append(cs.pending[fc.Name], id)
	return chat.ToolCall{ID: id, Name: fc.Name, Arguments: args}, nil
}

// result translates a function's response. One without an id answers the
// oldest unanswered call of its name. repeated says the same response to
// the same call came before: Gemini CLI sends each response twice in the
// history of a resumed session, and the worker must read it once, as it
// did before (so the conversation still matches its upstream session).
func (cs *contents) result(fr *functionResult) (chat.Message, bool) {
	id := fr.ID
	waiting := cs.pending[fr.Name]
	if id == "" && len(waiting) > 0 {
		id = waiting[0]
	}
	if id == "" {
		cs.calls++
		id = "call_" + strconv.Itoa(cs.calls)
	}
	for k, w := range waiting {
		if w == id {
			cs.pending[fr.Name] = append(waiting[:k:k], waiting[k+1:]...)
			break
		}
	}
	text := resultText(fr)
	if prev, ok := cs.answered[id]; ok && prev == text {
		return chat.Message{}, true
	}
	cs.answered[id] = text
	return chat.Message{Role: chat.RoleTool, ToolCallID: id, Name: fr.Name, Content: text}, false
}

// resultText flattens a function response for the worker: its output
// alone when that is all it holds ({"output": ...}, Gemini CLI's form),
// "Error: ..." for an error alone, else the response's JSON; then the text
// of its parts, with a note for data the worker cannot see.
func resultText(fr *functionResult) string {
	var t joiner
	if !jsonx.IsNull(fr.Response) {
		var obj map[string]json.RawMessage
		switch err := json.Unmarshal(fr.Response, &obj); {
		case err == nil && len(obj) == 1 && obj["output"] != nil:
			t.add(plain(obj["output"]), "\n\n")
		case err == nil && len(obj) == 1 && obj["error"] != nil:
			t.add("Error: "+plain(obj["error"]), "\n\n")
		default:
			t.add(compact(fr.Response), "\n\n")
		}
	}
	for k := range fr.Parts {
		p := &fr.Parts[k]
		p.merge()
		switch {
		case p.Text != nil:
			t.add(*p.Text, "\n\n")
		case !jsonx.IsNull(p.InlineData):
			t.add(inlineDataNote, "\n\n")
		case !jsonx.IsNull(p.FileData):
			t.add(fileDataNote, "\n\n")
		}
	}
	return t.String()
}

// plain is a JSON string's value, or any other JSON value as it is.
func plain(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return compact(raw)
}

func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(bytes.TrimSpace(raw))
	}
	return b.String()
}

// merge folds the snake_case spellings into the camelCase fields.
func (p *wirePart) merge() {
	p.FunctionCall = cmp.Or(p.FunctionCall, p.FunctionCall_)
	p.FunctionResponse = cmp.Or(p.FunctionResponse, p.FunctionResponse_)
	p.ThoughtSignature = cmp.Or(p.ThoughtSignature, p.ThoughtSignature_)
	orRaw(&p.InlineData, p.InlineData_)
	orRaw(&p.FileData, p.FileData_)
	orRaw(&p.ExecutableCode, p.ExecutableCode_)
	orRaw(&p.CodeExecutionResult, p.CodeExecutionResult_)
}

// orRaw folds other spellings of a raw field into *dst while it is absent
// or null: the first of alts that is set, else the last of them.
func orRaw(dst *json.RawMessage, alts ...json.RawMessage) {
	for _, alt := range alts {
		if jsonx.IsNull(*dst) {
			*dst = alt
		}
	}
}

// joiner joins text pieces with a separator.
type joiner struct {
	b       strings.Builder
	started bool
}

func (t *joiner) add(s, sep string) {
	if t.started {
		t.b.WriteString(sep)
	}
	t.b.WriteString(s)
	t.started = true
}

func (t *joiner) String() string { return t.b.String() }
