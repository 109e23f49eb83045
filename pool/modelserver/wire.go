package modelserver

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/jsonx"
)

// chunk is one streamed chat.completion.chunk, or a whole chat.completion
// (message instead of delta). Its fields accept the variants that
// OpenAI-compatible servers send; a field of the wrong type reads as empty
// rather than failing the chunk.
type chunk struct {
	Choices []choice    `json:"choices"`
	Usage   usageFields `json:"usage"`
	XGroq   struct {
		Usage usageFields `json:"usage"`
	} `json:"x_groq"`
	// Top-level counts, as Ollama puts them (prompt_eval_count, eval_count).
	usageFields
	Error json.RawMessage `json:"error"`
}

type choice struct {
	Delta        delta       `json:"delta"`
	Message      delta       `json:"message"`
	Text         flexText    `json:"text"` // legacy completions shape
	FinishReason flexText    `json:"finish_reason"`
	Usage        usageFields `json:"usage"` // a few servers put it here
}

type delta struct {
	Content      flexText        `json:"content"`
	ToolCalls    []toolCallDelta `json:"tool_calls"`
	FunctionCall *toolFunction   `json:"function_call"` // pre-tools shape
}

type toolCallDelta struct {
	Index    optInt       `json:"index"`
	ID       flexText     `json:"id"`
	Function toolFunction `json:"function"`
}

type toolFunction struct {
	Name      flexText `json:"name"`
	Arguments flexArgs `json:"arguments"`
}

// reset empties c for reuse without giving up its choices' backing array:
// encoding/json decodes into reused slice elements without zeroing them.
func (c *chunk) reset() {
	ch := c.Choices[:cap(c.Choices)]
	clear(ch)
	*c = chunk{Choices: ch[:0]}
}

// usageFields are the token counts under the names servers use for them.
type usageFields struct {
	InputTokens      flexInt `json:"input_tokens"`
	PromptTokens     flexInt `json:"prompt_tokens"`
	PromptEvalCount  flexInt `json:"prompt_eval_count"`
	OutputTokens     flexInt `json:"output_tokens"`
	CompletionTokens flexInt `json:"completion_tokens"`
	EvalCount        flexInt `json:"eval_count"`
}

// mergeInto overwrites the counts in u that this chunk reports: servers that
// repeat usage send running totals, so the last one wins.
func (f *usageFields) mergeInto(u *chat.Usage) {
	if n := int(cmpInt(f.InputTokens, f.PromptTokens, f.PromptEvalCount)); n > 0 {
		u.InputTokens = n
	}
	if n := int(cmpInt(f.OutputTokens, f.CompletionTokens, f.EvalCount)); n > 0 {
		u.OutputTokens = n
	}
}

func cmpInt(ns ...flexInt) flexInt {
	for _, n := range ns {
		if n > 0 {
			return n
		}
	}
	return 0
}

// flexInt is a count sent as a number, a float or a numeric string; anything
// else reads as 0.
type flexInt int64

// UnmarshalJSON implements json.Unmarshaler.
func (n *flexInt) UnmarshalJSON(b []byte) error {
	*n = 0
	if len(b) > 1 && b[0] == '"' {
		b = b[1 : len(b)-1]
	}
	if v, err := strconv.ParseInt(string(b), 10, 64); err == nil {
		*n = flexInt(v)
	} else if f, err := strconv.ParseFloat(string(b), 64); err == nil && f < 1e15 && f > -1e15 {
		*n = flexInt(f)
	}
	return nil
}

// optInt is an integer that may be absent.
type optInt struct {
	n  int
	ok bool
}

// UnmarshalJSON implements json.Unmarshaler.
func (o *optInt) UnmarshalJSON(b []byte) error {
	var n flexInt
	_ = n.UnmarshalJSON(b)
	*o = optInt{n: int(n), ok: !bytes.Equal(b, []byte("null")) && n >= 0 && n < 1<<20}
	return nil
}

// flexText is text sent as a string, as an array of content parts (strings
// or objects with a text field; other parts are skipped), or as a bare number
// or boolean; null reads as empty.
type flexText string

// UnmarshalJSON implements json.Unmarshaler.
func (t *flexText) UnmarshalJSON(b []byte) error {
	*t = ""
	switch {
	case len(b) == 0 || string(b) == "null":
	case b[0] == '"':
		*t = flexText(jsonx.Unquote(b))
	case b[0] == '[':
		var parts []json.RawMessage
		if json.Unmarshal(b, &parts) != nil {
			return nil
		}
		var sb strings.Builder
		for _, p := range parts {
			var part flexText
			_ = part.UnmarshalJSON(p)
			sb.WriteString(string(part))
		}
		*t = flexText(sb.String())
	case b[0] == '{':
		var part struct {
			Text *flexText `json:"text"`
		}
		if json.Unmarshal(b, &part) == nil && part.Text != nil {
			*t = *part.Text
		}
	default:
		*t = flexText(b)
	}
	return nil
}

// flexArgs is a tool call's arguments: a JSON-encoded string (possibly one
// fragment of it), or the arguments object itself.
type flexArgs struct {
	text  string
	whole bool // text is a complete JSON value, not a fragment
}

// UnmarshalJSON implements json.Unmarshaler.
func (a *flexArgs) UnmarshalJSON(b []byte) error {
	switch {
	case len(b) == 0 || string(b) == "null":
		*a = flexArgs{}
	case b[0] == '"':
		*a = flexArgs{text: jsonx.Unquote(b)}
	default:
		*a = flexArgs{text: string(b), whole: true}
	}
	return nil
}

// errorMessage returns the message of an error payload: an object with a
// message (or a nested error), or a string. Empty for null or false.
func errorMessage(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" || string(raw) == "false" {
		return ""
	}
	if !json.Valid(raw) {
		return clip(raw)
	}
	var obj struct {
		Message flexText        `json:"message"`
		Error   json.RawMessage `json:"error"`
	}
	if raw[0] == '{' && json.Unmarshal(raw, &obj) == nil {
		if obj.Message != "" {
			return string(obj.Message)
		}
		if m := errorMessage(obj.Error); m != "" {
			return m
		}
		return clip(raw)
	}
	var s flexText
	_ = s.UnmarshalJSON(raw)
	if s == "" {
		return clip(raw)
	}
	return string(s)
}

// payloadError maps an in-band error payload to the pool's errors. A code,
// type or status naming a rate limit is a *chat.RateLimitedError (without a
// retry hint: none travels in-band); anything else a *chat.UpstreamError.
func payloadError(raw json.RawMessage) error {
	msg := errorMessage(raw)
	if msg == "" {
		return nil
	}
	var obj struct {
		Type   flexText `json:"type"`
		Code   flexText `json:"code"`
		Status flexInt  `json:"status"`
	}
	_ = json.Unmarshal(raw, &obj)
	status := int(obj.Status)
	if n, err := strconv.Atoi(string(obj.Code)); err == nil {
		status = n
	}
	kind := strings.ToLower(string(obj.Type) + " " + string(obj.Code))
	if status == 429 || strings.Contains(kind, "rate_limit") || strings.Contains(kind, "quota") {
		return &chat.RateLimitedError{Message: msg}
	}
	if status < 400 || status > 599 {
		status = 0
	}
	return &chat.UpstreamError{Status: status, Message: msg}
}
