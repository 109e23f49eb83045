package openaichat

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/jsonx"
	"github.com/poolgate/poolgate/internal/openaiwire"
)

// wireRequest is the request body of POST /v1/chat/completions. Fields the
// gateway cannot honour are decoded so they can be rejected by name rather
// than silently dropped; fields it can ignore without changing the answer's
// meaning (user, seed, metadata, ...) are typed so a wrong type is still a 400.
// Unknown fields are accepted and ignored: clients and SDKs add vendor
// extensions freely (reasoning_effort, extra_body leftovers), and rejecting
// them would break more callers than it protects.
type wireRequest = openaiwire.Request[openaiwire.Message]

// Fields this protocol accepts but drops, as counted in
// poolgate_request_fields_ignored_total{protocol="chat"}.
const (
	dropReasoning        = "reasoning"
	dropThinking         = "thinking"
	dropTemplateKwargs   = "chat_template_kwargs"
	dropWebSearch        = "web_search_options"
	dropVerbosity        = "verbosity"
	dropReasoningContent = "messages.reasoning_content"
	dropCacheControl     = "cache_control"
	dropImages           = "content.image"
	dropAudio            = "content.audio"
	dropFiles            = "content.file"
)

// DroppedFields lists every field name the chat decoder may report as
// dropped, so the counter can be pre-initialised.
var DroppedFields = []string{
	dropReasoning, dropThinking, dropTemplateKwargs, dropWebSearch, dropVerbosity,
	dropReasoningContent, dropCacheControl, dropImages, dropAudio, dropFiles,
}

// dropTopLevel records the top-level fields a worker cannot honour.
func dropTopLevel(w *wireRequest, d *httpx.Dropped) {
	d.AddSet(dropReasoning, w.ReasoningEffort)
	d.AddSet(dropReasoning, w.Reasoning)
	d.AddSet(dropThinking, w.EnableThinking)
	d.AddSet(dropThinking, w.ThinkingBudget)
	d.AddSet(dropThinking, w.Thinking)
	d.AddSet(dropTemplateKwargs, w.ChatTemplateKwargs)
	d.AddSet(dropWebSearch, w.WebSearchOptions)
	d.AddSet(dropVerbosity, w.Verbosity)
}

// format is the answer format asked for: json_object and a non-strict
// json_schema ask the worker for a JSON answer (the schema as a hint).
func format(f *openaiwire.ResponseFormat) chat.Format {
	switch {
	case f == nil, f.Type == "text":
		return chat.Format{}
	case f.Type == "json_schema" && f.JSONSchema != nil && !jsonx.IsNull(f.JSONSchema.Schema):
		return chat.Format{JSON: true, Schema: f.JSONSchema.Schema}
	}
	return chat.Format{JSON: true}
}

// options are the request's settings that shape the response, not the
// worker's turn, and what decoding dropped.
type options struct {
	stream       bool
	includeUsage bool
	dropped      httpx.Dropped
}

// maxStops is OpenAI's limit on stop sequences.
const maxStops = 4

// decodeRequest parses a request body into the neutral request and
// validates it. Every error it returns is an *apierr.RequestError (a 400).
func decodeRequest(body []byte) (*chat.Request, options, error) {
	var w wireRequest
	if !openaiwire.FastRequest(body, &w) {
		w = wireRequest{}
		if err := unmarshal(body, &w, ""); err != nil {
			return nil, options{}, locate(body, err)
		}
	}
	if err := reject(&w); err != nil {
		return nil, options{}, err
	}
	var opt options
	dropTopLevel(&w, &opt.dropped)
	req := &chat.Request{Model: w.Model, AffinityHint: w.User, Format: format(w.ResponseFormat)}
	var err error
	if req.Messages, err = decodeMessages(w.Messages, &opt.dropped); err != nil {
		return nil, options{}, err
	}
	if req.Tools, err = decodeTools(w.Tools); err != nil {
		return nil, options{}, err
	}
	if req.ToolChoice, err = decodeToolChoice(w.ToolChoice); err != nil {
		return nil, options{}, err
	}
	if req.Stop, err = decodeStop(w.Stop); err != nil {
		return nil, options{}, err
	}
	if err := checkRanges(&w); err != nil {
		return nil, options{}, err
	}
	// max_completion_tokens replaces the deprecated max_tokens; 0 means no cap.
	switch {
	case w.MaxCompletionTokens != nil:
		req.MaxTokens = *w.MaxCompletionTokens
	case w.MaxTokens != nil:
		req.MaxTokens = *w.MaxTokens
	}
	req.Temperature, req.TopP = w.Temperature, w.TopP
	opt.stream = w.Stream != nil && *w.Stream
	opt.includeUsage = opt.stream && w.StreamOptions != nil && w.StreamOptions.IncludeUsage
	req.Stream = opt.stream
	if err := apierr.Validate(req, param); err != nil {
		return nil, options{}, err
	}
	return req, opt, nil
}

// reject refuses features the text-only workers cannot provide.
func reject(w *wireRequest) error {
	switch {
	case w.N != nil && *w.N != 1:
		return badRequest("n", apierr.CodeUnsupValue, "only n=1 is supported")
	case w.Logprobs != nil && *w.Logprobs:
		return badRequest("logprobs", apierr.CodeUnsupported, "logprobs are not supported")
	case w.TopLogprobs != nil && *w.TopLogprobs != 0:
		return badRequest("top_logprobs", apierr.CodeUnsupported, "logprobs are not supported")
	case !jsonx.IsNull(w.Audio):
		return badRequest("audio", apierr.CodeUnsupported, "audio output is not supported")
	case !jsonx.IsNull(w.Prediction):
		return badRequest("prediction", apierr.CodeUnsupported, "predicted outputs are not supported")
	case !jsonx.IsNull(w.Functions):
		return badRequest("functions", apierr.CodeUnsupported, "functions is deprecated and not supported; use tools")
	case !jsonx.IsNull(w.FunctionCall):
		return badRequest("function_call", apierr.CodeUnsupported, "function_call is deprecated and not supported; use tool_choice")
	}
	for _, m := range w.Modalities {
		if m != "text" {
			return badRequest("modalities", apierr.CodeUnsupValue, "only the text modality is supported, got %q", m)
		}
	}
	if f := w.ResponseFormat; f != nil {
		switch f.Type {
		case "text", "json_object":
		case "json_schema":
			// A non-strict schema is a hint the model may follow; a strict
			// one is a guarantee the gateway cannot give.
			if f.JSONSchema != nil && f.JSONSchema.Strict != nil && *f.JSONSchema.Strict {
				return badRequest("response_format", apierr.CodeUnsupValue, "strict json_schema output is not supported")
			}
		default:
			return badRequest("response_format.type", apierr.CodeInvalid, "unknown response format %q", f.Type)
		}
	}
	return nil
}

// checkRanges validates numeric fields against OpenAI's documented ranges.
func checkRanges(w *wireRequest) error {
	ranges := []struct {
		param  string
		v      *float64
		lo, hi float64
	}{
		{"temperature", w.Temperature, 0, 2},
		{"frequency_penalty", w.FrequencyPenalty, -2, 2},
		{"presence_penalty", w.PresencePenalty, -2, 2},
	}
	for _, r := range ranges {
		if r.v != nil && (*r.v < r.lo || *r.v > r.hi) {
			return badRequest(r.param, apierr.CodeInvalid, "must be between %g and %g, got %g", r.lo, r.hi, *r.v)
		}
	}
	if w.MaxTokens != nil && *w.MaxTokens < 0 {
		return badRequest("max_tokens", apierr.CodeInvalid, "must not be negative, got %d", *w.MaxTokens)
	}
	if w.MaxCompletionTokens != nil && *w.MaxCompletionTokens < 0 {
		return badRequest("max_completion_tokens", apierr.CodeInvalid, "must not be negative, got %d", *w.MaxCompletionTokens)
	}
	return nil
}

// msgDecoder is the translation of one messages list under way.
type msgDecoder struct {
	dropped *httpx.Dropped
	// current is the index of the last user message, the one an answer
	// depends on.
	current   int
	toolNames map[string]string // tool call id -> function name
}

func decodeMessages(items []openaiwire.Message, dropped *httpx.Dropped) ([]chat.Message, error) {
	if items == nil {
		return nil, badRequest("messages", apierr.CodeMissing, "is required")
	}
	d := msgDecoder{dropped: dropped, current: -1}
	for i := len(items) - 1; i >= 0; i-- {
		if items[i].Role == "user" {
			d.current = i
			break
		}
	}
	msgs := make([]chat.Message, len(items))
	for i := range items {
		if err := d.decodeMessage(&items[i], i, &msgs[i]); err != nil {
			return nil, err
		}
	}
	return msgs, nil
}

// locate refines a type error inside the messages or tools array: the
// one-pass decode names the field but not the element, so the array is
// decoded again element by element (only on this error path) to name it.
func locate(body []byte, err error) error {
	var re *apierr.RequestError
	if !errors.As(err, &re) || re.Code != apierr.CodeInvalidType {
		return err
	}
	var probe struct {
		Messages []json.RawMessage `json:"messages"`
		Tools    []json.RawMessage `json:"tools"`
	}
	if json.Unmarshal(body, &probe) != nil {
		return err // the array itself has the wrong type: err names it
	}
	var arr []json.RawMessage
	var name string
	var elem any
	switch {
	case strings.HasPrefix(re.Param, "messages"):
		arr, name, elem = probe.Messages, "messages", new(openaiwire.Message)
	case strings.HasPrefix(re.Param, "tools"):
		arr, name, elem = probe.Tools, "tools", new(openaiwire.Tool)
	default:
		return err
	}
	for i, raw := range arr {
		if e := unmarshal(raw, elem, fmt.Sprintf("%s[%d]", name, i)); e != nil {
			return e
		}
	}
	return err
}

// msgPath names messages[i] in an error; it is formatted only for one.
type msgPath int

func (i msgPath) at(suffix string) string { return "messages[" + strconv.Itoa(int(i)) + "]" + suffix }

func (d *msgDecoder) decodeMessage(wm *openaiwire.Message, i int, m *chat.Message) error {
	path := msgPath(i)
	switch wm.Role {
	case "system", "developer":
		m.Role = chat.RoleSystem
	case "user":
		m.Role = chat.RoleUser
	case "assistant":
		m.Role = chat.RoleAssistant
	case "tool":
		m.Role = chat.RoleTool
	case "":
		return badRequest(path.at(".role"), apierr.CodeMissing, "is required")
	default:
		return badRequest(path.at(".role"), apierr.CodeInvalid,
			"unsupported role %q (want system, developer, user, assistant or tool)", wm.Role)
	}
	if !jsonx.IsNull(wm.FunctionCall) {
		return badRequest(path.at(".function_call"), apierr.CodeUnsupported, "function_call is deprecated and not supported; use tool_calls")
	}
	d.dropped.AddSet(dropReasoningContent, wm.ReasoningContent)
	var err error
	if m.Content, err = d.decodeContent(wm.Content, path, i == d.current); err != nil {
		return err
	}
	if m.ToolCalls, err = decodeToolCalls(wm.ToolCalls, path, &d.toolNames); err != nil {
		return err
	}
	if m.Role == chat.RoleTool {
		m.ToolCallID = wm.ToolCallID
		m.Name = d.toolNames[wm.ToolCallID]
	}
	if jsonx.IsNull(wm.Content) && m.Role != chat.RoleAssistant {
		return badRequest(path.at(".content"), apierr.CodeMissing, "is required for %s messages", wm.Role)
	}
	return nil
}

func decodeToolCalls(calls []openaiwire.ToolCall, path msgPath, toolNames *map[string]string) ([]chat.ToolCall, error) {
	if len(calls) == 0 {
		return nil, nil
	}
	out := make([]chat.ToolCall, len(calls))
	for j, c := range calls {
		if c.Type != "" && c.Type != "function" {
			return nil, badRequest(path.at(fmt.Sprintf(".tool_calls[%d].type", j)), apierr.CodeUnsupValue, "unsupported tool call type %q", c.Type)
		}
		args := c.Function.Arguments
		if strings.TrimSpace(args) == "" {
			args = "{}"
		}
		out[j] = chat.ToolCall{ID: c.ID, Name: c.Function.Name, Arguments: args}
		if c.ID != "" {
			if *toolNames == nil {
				*toolNames = make(map[string]string)
			}
			(*toolNames)[c.ID] = c.Function.Name
		}
	}
	return out, nil
}

// decodeContent accepts a string, null, or an array of text parts (joined
// with no separator, as OpenAI does). Media parts (images, audio, files)
// become a short note, since the workers are text-only and the conversation
// must read on; a current turn made only of media is a 400, since any answer
// would pretend to have seen it.
func (d *msgDecoder) decodeContent(raw json.RawMessage, path msgPath, current bool) (string, error) {
	if jsonx.IsNull(raw) {
		return "", nil
	}
	if raw[0] == '"' {
		// The body's decoder has validated the string.
		return jsonx.Unquote(raw), nil
	}
	if raw[0] != '[' {
		return "", badRequest(path.at(".content"), apierr.CodeInvalidType, "must be a string, an array of content parts or null")
	}
	var parts []openaiwire.Part
	if !openaiwire.FastParts(raw, &parts) {
		parts = nil
		if err := unmarshal(raw, &parts, path.at(".content")); err != nil {
			return "", err
		}
	}
	if len(parts) == 1 && parts[0].Type == "text" && parts[0].Text != nil && jsonx.IsNull(parts[0].CacheControl) {
		return *parts[0].Text, nil
	}
	var b strings.Builder
	media, words := 0, 0
	for j, p := range parts {
		d.dropped.AddSet(dropCacheControl, p.CacheControl)
		switch p.Type {
		case "text":
			if p.Text == nil {
				return "", badRequest(path.at(fmt.Sprintf(".content[%d].text", j)), apierr.CodeMissing, "is required for text parts")
			}
			b.WriteString(*p.Text)
			if strings.TrimSpace(*p.Text) != "" {
				words++
			}
		case "refusal":
			if p.Refusal != nil {
				b.WriteString(*p.Refusal)
			}
		case "image_url", "input_audio", "file":
			d.dropped.Add(mediaDrops[p.Type])
			if b.Len() > 0 {
				b.WriteString("\n\n")
			}
			b.WriteString(mediaNotes[p.Type])
			media++
		default:
			return "", badRequest(path.at(fmt.Sprintf(".content[%d].type", j)), apierr.CodeInvalid, "unknown content part type %q", p.Type)
		}
	}
	if current && media > 0 && words == 0 {
		return "", badRequest(path.at(".content"), apierr.CodeUnsupValue, "this turn is only images, audio or files, which the workers cannot read (they are text-only)")
	}
	return b.String(), nil
}

// Notes that stand in for media the text-only workers cannot see.
var (
	mediaNotes = map[string]string{
		"image_url":   "[image omitted: the model cannot see images]",
		"input_audio": "[audio omitted: the model cannot hear audio]",
		"file":        "[file omitted: the model cannot read attached files]",
	}
	mediaDrops = map[string]string{"image_url": dropImages, "input_audio": dropAudio, "file": dropFiles}
)

func decodeTools(tools []openaiwire.Tool) ([]chat.Tool, error) {
	if len(tools) == 0 {
		return nil, nil
	}
	out := make([]chat.Tool, 0, len(tools))
	for i, t := range tools {
		p := "tools[" + strconv.Itoa(i) + "]"
		if t.Type != "function" {
			return nil, badRequest(p+".type", apierr.CodeUnsupValue, "unsupported tool type %q (only function)", t.Type)
		}
		f := t.Function
		if f == nil {
			out = append(out, chat.Tool{}) // a function with no name: Validate names the field
			continue
		}
		params := f.Parameters
		if jsonx.IsNull(params) {
			params = nil
		} else if params[0] != '{' {
			return nil, badRequest(p+".function.parameters", apierr.CodeInvalidType, "must be a JSON schema object")
		}
		out = append(out, chat.Tool{Name: f.Name, Description: f.Description, Parameters: params})
	}
	return out, nil
}

// decodeToolChoice reads tool_choice; whether the tools can satisfy it is
// for Validate.
func decodeToolChoice(raw json.RawMessage) (chat.ToolChoice, error) {
	if jsonx.IsNull(raw) {
		return chat.ToolChoice{}, nil
	}
	var tc chat.ToolChoice
	if raw[0] == '"' {
		var s string
		if err := unmarshal(raw, &s, "tool_choice"); err != nil {
			return tc, err
		}
		switch s {
		case "auto":
			return tc, nil
		case "none":
			return chat.ToolChoice{Mode: chat.ToolNone}, nil
		case "required":
			return chat.ToolChoice{Mode: chat.ToolRequired}, nil
		default:
			return tc, badRequest("tool_choice", apierr.CodeInvalid, "unknown tool_choice %q (want auto, none, required or a function)", s)
		}
	} else {
		var w openaiwire.NamedToolChoice
		if err := unmarshal(raw, &w, "tool_choice"); err != nil {
			return tc, err
		}
		if w.Type != "function" {
			return tc, badRequest("tool_choice.type", apierr.CodeUnsupValue, "unsupported tool_choice type %q", w.Type)
		}
		if w.Function == nil || w.Function.Name == "" {
			return tc, badRequest("tool_choice.function.name", apierr.CodeMissing, "is required")
		}
		return chat.ToolChoice{Mode: chat.ToolNamed, Name: w.Function.Name}, nil
	}
}

func decodeStop(raw json.RawMessage) ([]string, error) {
	if jsonx.IsNull(raw) {
		return nil, nil
	}
	var stops []string
	if raw[0] == '"' {
		var s string
		if err := unmarshal(raw, &s, "stop"); err != nil {
			return nil, err
		}
		stops = []string{s}
	} else if err := unmarshal(raw, &stops, "stop"); err != nil {
		return nil, err
	}
	if len(stops) > maxStops {
		return nil, badRequest("stop", apierr.CodeInvalid, "at most %d stop sequences are allowed, got %d", maxStops, len(stops))
	}
	out := stops[:0]
	for _, s := range stops {
		if s != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// unmarshal decodes data into v and turns decoding errors into request
// errors naming the parameter (prefix is the path of data in the body).
func unmarshal(data []byte, v any, prefix string) error {
	err := json.Unmarshal(data, v)
	if err == nil {
		return nil
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return badRequest("", apierr.CodeInvalidJSON, "the body is not valid JSON: %v", se)
	case errors.As(err, &te):
		param := joinParam(prefix, te.Field)
		if param == "" {
			return badRequest("", apierr.CodeInvalidType, "the body must be a JSON object")
		}
		return badRequest(param, apierr.CodeInvalidType, "must be %s, got %s", jsonKind(te.Type), te.Value)
	default:
		return badRequest(prefix, apierr.CodeInvalid, "%v", err)
	}
}

func joinParam(prefix, field string) string {
	switch {
	case prefix == "":
		return field
	case field == "":
		return prefix
	default:
		return prefix + "." + field
	}
}

// jsonKind names the JSON type a Go type decodes from.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	default:
		return "an object"
	}
}
