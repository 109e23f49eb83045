package openaiwire

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/poolgate/poolgate/internal/jsonx"
)

// encoding/json decodes a request body by reflection after scanning it once
// to validate it, and the body of a coding agent's turn is mostly the
// transcript: long strings scanned twice. FastRequest reads the fields
// agents and SDKs send in one pass and gives up on anything else (a field it
// does not read, a key spelt in another case, a repeated key, a value of an
// unexpected type or a number it would have to round), so the Request
// it fills is always the one encoding/json would have decoded, and every
// error is still encoding/json's.

// Lower-case field names of the wire types, for telling an unknown key
// (skipped) from a variant spelling of a known one (encoding/json's).
var (
	requestFields = []string{"model", "messages", "tools", "tool_choice", "stream", "stream_options",
		"max_tokens", "max_completion_tokens", "stop", "temperature", "top_p", "frequency_penalty",
		"presence_penalty", "n", "response_format", "user", "seed", "parallel_tool_calls", "service_tier",
		"metadata", "store", "logprobs", "top_logprobs", "audio", "modalities", "prediction", "functions",
		"function_call", "reasoning_effort", "reasoning", "enable_thinking", "thinking_budget", "thinking",
		"chat_template_kwargs", "web_search_options", "verbosity"}
	messageFields  = []string{"role", "content", "name", "tool_calls", "tool_call_id", "refusal", "function_call", "reasoning_content"}
	toolCallFields = []string{"id", "type", "function"}
	functionFields = []string{"name", "arguments"}
	toolFields     = []string{"type", "function"}
	toolFuncFields = []string{"name", "description", "parameters", "strict"}
	includeFields  = []string{"include_usage"}
	partFields     = []string{"type", "text", "refusal", "cache_control"}

	requestKeys  = jsonx.NewNames(requestFields...)
	messageKeys  = jsonx.NewNames(messageFields...)
	toolCallKeys = jsonx.NewNames(toolCallFields...)
	functionKeys = jsonx.NewNames(functionFields...)
	toolKeys     = jsonx.NewNames(toolFields...)
	toolFuncKeys = jsonx.NewNames(toolFuncFields...)
	includeKeys  = jsonx.NewNames(includeFields...)
	partKeys     = jsonx.NewNames(partFields...)
)

// FastRequest decodes body into w, which must be zero, when body is a
// request of the common shape, and reports whether it did; false leaves w to
// be reset and decoded by encoding/json.
func FastRequest(body []byte, w *Request[Message]) bool {
	d := fastDecoder{Scanner: jsonx.NewScanner(body)}
	return d.request(w) && d.End()
}

// FastParts decodes a message's content parts into parts, which must be
// nil, as FastRequest decodes a body.
func FastParts(raw []byte, parts *[]Part) bool {
	d := fastDecoder{Scanner: jsonx.NewScanner(raw)}
	return list(&d, parts, 0, func(p *Part) bool {
		return d.fields(partKeys, func(i int) bool {
			switch partFields[i] {
			case "type":
				return d.str(&p.Type)
			case "text":
				return d.optStr(&p.Text)
			case "refusal":
				return d.optStr(&p.Refusal)
			}
			return d.raw(&p.CacheControl)
		})
	}) && d.End()
}

type fastDecoder struct {
	jsonx.Scanner
}

// seen marks the keys of one object read so far; a repeated one is
// encoding/json's (it merges objects and keeps the last scalar).
type seen uint64

func (s *seen) first(i int) bool {
	bit := seen(1) << i
	if *s&bit != 0 {
		return false
	}
	*s |= bit
	return true
}

// fields reads an object whose known keys are names: read is called with
// the key's index in names; unknown keys are skipped.
func (d *fastDecoder) fields(names *jsonx.Names, read func(i int) bool) bool {
	var s seen
	return d.Object(func(key []byte) bool {
		if i := names.Index(key); i >= 0 {
			return s.first(i) && read(i)
		}
		if names.Folds(key) {
			return false
		}
		return d.Skip()
	})
}

func (d *fastDecoder) request(w *Request[Message]) bool {
	return d.fields(requestKeys, func(i int) bool {
		switch requestFields[i] {
		case "model":
			return d.str(&w.Model)
		case "messages":
			return list(d, &w.Messages, 8, d.message)
		case "tools":
			return list(d, &w.Tools, 0, d.tool)
		case "stream":
			return d.optBool(&w.Stream)
		case "stream_options":
			return d.null() || d.streamOptions(&w.StreamOptions)
		case "max_tokens":
			return d.optInt(&w.MaxTokens)
		case "max_completion_tokens":
			return d.optInt(&w.MaxCompletionTokens)
		case "n":
			return d.optInt(&w.N)
		case "top_logprobs":
			return d.optInt(&w.TopLogprobs)
		case "temperature":
			return d.optFloat(&w.Temperature)
		case "top_p":
			return d.optFloat(&w.TopP)
		case "frequency_penalty":
			return d.optFloat(&w.FrequencyPenalty)
		case "presence_penalty":
			return d.optFloat(&w.PresencePenalty)
		case "user":
			return d.str(&w.User)
		case "parallel_tool_calls":
			return d.optBool(&w.ParallelToolCalls)
		case "store":
			return d.optBool(&w.Store)
		case "logprobs":
			return d.optBool(&w.Logprobs)
		case "tool_choice":
			return d.raw(&w.ToolChoice)
		case "stop":
			return d.raw(&w.Stop)
		case "audio":
			return d.raw(&w.Audio)
		case "prediction":
			return d.raw(&w.Prediction)
		case "functions":
			return d.raw(&w.Functions)
		case "function_call":
			return d.raw(&w.FunctionCall)
		case "reasoning_effort":
			return d.raw(&w.ReasoningEffort)
		case "reasoning":
			return d.raw(&w.Reasoning)
		case "enable_thinking":
			return d.raw(&w.EnableThinking)
		case "thinking_budget":
			return d.raw(&w.ThinkingBudget)
		case "thinking":
			return d.raw(&w.Thinking)
		case "chat_template_kwargs":
			return d.raw(&w.ChatTemplateKwargs)
		case "web_search_options":
			return d.raw(&w.WebSearchOptions)
		case "verbosity":
			return d.raw(&w.Verbosity)
		case "metadata":
			return d.null() || d.metadata(&w.Metadata)
		}
		return false // response_format, seed, service_tier, modalities
	})
}

// list reads an array of T, each element with elem, or a null, which
// leaves out nil; a null element stays zero, as with encoding/json. Room
// for size elements is made up front.
func list[T any](d *fastDecoder, out *[]T, size int, elem func(*T) bool) bool {
	if d.null() {
		return true
	}
	items := make([]T, 0, size) // not nil, even when empty
	ok := d.Array(func() bool {
		var zero T
		items = append(items, zero)
		return d.null() || elem(&items[len(items)-1])
	})
	*out = items
	return ok
}

func (d *fastDecoder) message(m *Message) bool {
	return d.fields(messageKeys, func(i int) bool {
		switch messageFields[i] {
		case "role":
			return d.str(&m.Role)
		case "content":
			return d.raw(&m.Content)
		case "name":
			return d.str(&m.Name)
		case "tool_calls":
			return list(d, &m.ToolCalls, 0, d.toolCall)
		case "tool_call_id":
			return d.str(&m.ToolCallID)
		case "refusal":
			return d.optStr(&m.Refusal)
		case "function_call":
			return d.raw(&m.FunctionCall)
		case "reasoning_content":
			return d.raw(&m.ReasoningContent)
		}
		return false
	})
}

func (d *fastDecoder) toolCall(c *ToolCall) bool {
	return d.fields(toolCallKeys, func(i int) bool {
		switch toolCallFields[i] {
		case "id":
			return d.str(&c.ID)
		case "type":
			return d.str(&c.Type)
		}
		return d.null() || d.fields(functionKeys, func(i int) bool {
			if i == 0 {
				return d.str(&c.Function.Name)
			}
			return d.str(&c.Function.Arguments)
		})
	})
}

func (d *fastDecoder) tool(t *Tool) bool {
	return d.fields(toolKeys, func(i int) bool {
		if i == 0 {
			return d.str(&t.Type)
		}
		if d.null() {
			return true
		}
		f := &ToolFunction{}
		t.Function = f
		return d.fields(toolFuncKeys, func(i int) bool {
			switch toolFuncFields[i] {
			case "name":
				return d.str(&f.Name)
			case "description":
				return d.str(&f.Description)
			case "parameters":
				return d.raw(&f.Parameters)
			}
			return d.optBool(&f.Strict)
		})
	})
}

func (d *fastDecoder) streamOptions(out **StreamOptions) bool {
	o := &StreamOptions{}
	*out = o
	return d.fields(includeKeys, func(int) bool {
		if d.null() {
			return true
		}
		v, ok := d.Bool()
		o.IncludeUsage = v
		return ok
	})
}

// metadata reads an object of strings; a repeated key keeps the last value,
// as encoding/json does.
func (d *fastDecoder) metadata(out *map[string]string) bool {
	m := map[string]string{}
	*out = m
	return d.Object(func(key []byte) bool {
		if d.Peek() != '"' || !utf8.Valid(key) {
			return false // null, another type or a key encoding/json would mend
		}
		v, ok := d.String()
		m[string(key)] = v
		return ok
	})
}

// null consumes a null; encoding/json leaves the field as it was.
func (d *fastDecoder) null() bool { return d.Literal("null") }

func (d *fastDecoder) str(out *string) bool {
	if d.null() {
		return true
	}
	s, ok := d.String()
	*out = s
	return ok
}

// opt reads a value of a pointer field with read; null leaves it nil.
func opt[T any](d *fastDecoder, out **T, read func() (T, bool)) bool {
	if d.null() {
		return true
	}
	v, ok := read()
	*out = &v
	return ok
}

func (d *fastDecoder) optStr(out **string) bool    { return opt(d, out, d.String) }
func (d *fastDecoder) optBool(out **bool) bool     { return opt(d, out, d.Bool) }
func (d *fastDecoder) optFloat(out **float64) bool { return opt(d, out, d.Float) }
func (d *fastDecoder) optInt(out **int) bool {
	return opt(d, out, func() (int, bool) {
		v, ok := d.Int()
		return int(v), ok
	})
}

func (d *fastDecoder) raw(out *json.RawMessage) bool {
	v, ok := d.Raw()
	*out = v
	return ok
}
