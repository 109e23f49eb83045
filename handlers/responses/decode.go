package responses

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/poolgate/poolgate/pool"
)

// createRequest is the wire body of POST /v1/responses. Harmless fields
// (user, parallel_tool_calls, service_tier, truncation, reasoning,
// stream_options, safety_identifier) are accepted; the ones that would change
// the answer and can't be honoured are decoded only to be rejected.
type createRequest struct {
	Model              string            `json:"model"`
	Input              json.RawMessage   `json:"input"`
	Instructions       *string           `json:"instructions"`
	Tools              []json.RawMessage `json:"tools"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Temperature        *float64          `json:"temperature"`
	TopP               *float64          `json:"top_p"`
	Metadata           map[string]string `json:"metadata"`
	Stream             bool              `json:"stream"`
	Store              *bool             `json:"store"`
	PreviousResponseID string            `json:"previous_response_id"`
	User               string            `json:"user"`
	PromptCacheKey     string            `json:"prompt_cache_key"`
	ParallelToolCalls  *bool             `json:"parallel_tool_calls"`
	Truncation         string            `json:"truncation"`

	Background   bool            `json:"background"`
	Include      []string        `json:"include"`
	Text         *textOptions    `json:"text"`
	Conversation json.RawMessage `json:"conversation"`
	Prompt       json.RawMessage `json:"prompt"`
	TopLogprobs  *int            `json:"top_logprobs"`
	MaxToolCalls *int            `json:"max_tool_calls"`
}

type textOptions struct {
	Format *struct {
		Type string `json:"type"`
	} `json:"format"`
}

// inputItem is any item of a list input; Type (or Role, for the short
// message form) says which fields are meaningful.
type inputItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	ID        string          `json:"id"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type functionTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// decoded is a validated create request: the neutral request without the
// stored history, and this turn's input as neutral messages and as items.
type decoded struct {
	wire  createRequest
	chat  pool.ChatRequest
	input []pool.Message
	items []item
}

// decodeCreate parses and validates a create body.
func decodeCreate(body []byte) (*decoded, error) {
	d := &decoded{}
	in := &d.wire
	if err := json.Unmarshal(body, in); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return nil, badParam(te.Field, fmt.Sprintf("%s: expected %s, got %s", te.Field, te.Type, te.Value))
		}
		return nil, badParam("", "invalid JSON body: "+err.Error())
	}
	if err := in.validate(); err != nil {
		return nil, err
	}
	var err error
	if d.input, d.items, err = decodeInput(in.Input); err != nil {
		return nil, err
	}
	c := &d.chat
	c.Model, c.Temperature, c.TopP, c.Stream = in.Model, in.Temperature, in.TopP, in.Stream
	if in.MaxOutputTokens != nil {
		c.MaxTokens = *in.MaxOutputTokens
	}
	c.AffinityHint = in.PromptCacheKey
	if c.AffinityHint == "" {
		c.AffinityHint = in.User
	}
	if c.Tools, err = decodeTools(in.Tools); err != nil {
		return nil, err
	}
	if c.ToolChoice, err = decodeToolChoice(in.ToolChoice, c.Tools); err != nil {
		return nil, err
	}
	return d, nil
}

func (in *createRequest) validate() error {
	switch {
	case in.Model == "" && in.PreviousResponseID == "":
		return badParam("model", "model: field required")
	case isNull(in.Input):
		return badParam("input", "input: field required")
	case in.Background:
		return badParam("background", "background responses are not supported by this gateway")
	case !isNull(in.Conversation):
		return badParam("conversation", "conversations are not supported; use previous_response_id")
	case !isNull(in.Prompt):
		return badParam("prompt", "prompt templates are not supported by this gateway")
	case in.TopLogprobs != nil && *in.TopLogprobs > 0:
		return badParam("top_logprobs", "logprobs are not supported by this gateway")
	case in.MaxToolCalls != nil:
		return badParam("max_tool_calls", "max_tool_calls is not supported by this gateway")
	case in.MaxOutputTokens != nil && *in.MaxOutputTokens < 1:
		return badParam("max_output_tokens", "max_output_tokens must be at least 1")
	case in.Temperature != nil && (*in.Temperature < 0 || *in.Temperature > 2):
		return badParam("temperature", "temperature must be between 0 and 2")
	case in.TopP != nil && (*in.TopP < 0 || *in.TopP > 1):
		return badParam("top_p", "top_p must be between 0 and 1")
	case in.Truncation != "" && in.Truncation != "auto" && in.Truncation != "disabled":
		return badParam("truncation", "truncation must be \"auto\" or \"disabled\"")
	case in.Text != nil && in.Text.Format != nil && in.Text.Format.Type != "text":
		return badParam("text.format", fmt.Sprintf("text.format type %q is not supported; the workers cannot enforce structured output", in.Text.Format.Type))
	}
	for _, inc := range in.Include {
		// Encrypted reasoning is a no-op (the workers produce no reasoning
		// items); Codex asks for it on every turn.
		if inc != "reasoning.encrypted_content" {
			return badParam("include", fmt.Sprintf("include value %q is not supported by this gateway", inc))
		}
	}
	return validateMetadata(in.Metadata)
}

func validateMetadata(m map[string]string) error {
	if len(m) > 16 {
		return badParam("metadata", "metadata may have at most 16 keys")
	}
	for k, v := range m {
		if len(k) > 64 || len(v) > 512 {
			return badParam("metadata", "metadata keys are at most 64 characters and values at most 512")
		}
	}
	return nil
}

// decodeInput turns a string or item-list input into neutral messages and
// the items input_items lists.
func decodeInput(raw json.RawMessage) ([]pool.Message, []item, error) {
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, nil, badParam("input", "input: "+err.Error())
		}
		return []pool.Message{{Role: pool.RoleUser, Content: s}},
			[]item{{ID: newID("msg_"), Type: "message", Status: "completed", Role: pool.RoleUser, Parts: []string{s}}}, nil
	}
	var list []inputItem
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, nil, badParam("input", "input must be a string or a list of items")
	}
	if len(list) == 0 {
		return nil, nil, badParam("input", "input must not be empty")
	}
	msgs := make([]pool.Message, 0, len(list))
	items := make([]item, 0, len(list))
	for i := range list {
		var err error
		if msgs, items, err = appendItem(msgs, items, i, &list[i]); err != nil {
			return nil, nil, err
		}
	}
	return msgs, items, nil
}

func appendItem(msgs []pool.Message, items []item, i int, it *inputItem) ([]pool.Message, []item, error) {
	param := fmt.Sprintf("input[%d]", i)
	switch it.Type {
	case "message", "":
		role, parts, err := messageParts(param, it)
		if err != nil {
			return nil, nil, err
		}
		msgs = append(msgs, pool.Message{Role: role, Content: strings.Join(parts, "\n\n")})
		return msgs, append(items, item{ID: idOr(it.ID, "msg_"), Type: "message", Status: "completed", Role: it.Role, Parts: parts}), nil
	case "function_call":
		if it.CallID == "" || it.Name == "" {
			return nil, nil, badParam(param, param+": function_call needs call_id and name")
		}
		call := pool.ToolCall{ID: it.CallID, Name: it.Name, Arguments: it.Arguments}
		// Calls right after an assistant message (or each other) belong to
		// that one assistant turn.
		if n := len(msgs); n > 0 && msgs[n-1].Role == pool.RoleAssistant {
			msgs[n-1].ToolCalls = append(msgs[n-1].ToolCalls, call)
		} else {
			msgs = append(msgs, pool.Message{Role: pool.RoleAssistant, ToolCalls: []pool.ToolCall{call}})
		}
		return msgs, append(items, item{ID: idOr(it.ID, "fc_"), Type: "function_call", Status: "completed",
			CallID: it.CallID, Name: it.Name, Arguments: it.Arguments}), nil
	case "function_call_output":
		out, err := callOutput(param, it)
		if err != nil {
			return nil, nil, err
		}
		msgs = append(msgs, pool.Message{Role: pool.RoleTool, ToolCallID: it.CallID, Content: out})
		return msgs, append(items, item{ID: idOr(it.ID, "fco_"), Type: "function_call_output", Status: "completed",
			CallID: it.CallID, Output: out}), nil
	case "reasoning":
		// Reasoning from another server: the workers neither make nor read it.
		return msgs, items, nil
	default:
		return nil, nil, badParam(param, fmt.Sprintf("%s: input item type %q is not supported by this gateway", param, it.Type))
	}
}

// messageParts validates a message item and returns its neutral role and text parts.
func messageParts(param string, it *inputItem) (string, []string, error) {
	var role string
	switch it.Role {
	case "user":
		role = pool.RoleUser
	case "assistant":
		role = pool.RoleAssistant
	case "system", "developer":
		role = pool.RoleSystem
	default:
		return "", nil, badParam(param+".role", fmt.Sprintf("%s.role must be user, assistant, system or developer, got %q", param, it.Role))
	}
	if isNull(it.Content) {
		return "", nil, badParam(param+".content", param+".content: field required")
	}
	if it.Content[0] == '"' {
		var s string
		if err := json.Unmarshal(it.Content, &s); err != nil {
			return "", nil, badParam(param+".content", param+".content: "+err.Error())
		}
		return role, []string{s}, nil
	}
	var parts []contentPart
	if err := json.Unmarshal(it.Content, &parts); err != nil {
		return "", nil, badParam(param+".content", param+".content must be a string or a list of parts")
	}
	texts := make([]string, 0, len(parts))
	for j, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "refusal", "text":
			texts = append(texts, p.Text)
		default:
			pp := fmt.Sprintf("%s.content[%d]", param, j)
			return "", nil, badParam(pp, fmt.Sprintf("%s: %s parts are not supported; the workers are text-only", pp, p.Type))
		}
	}
	return role, texts, nil
}

// callOutput returns a function_call_output's output, a string or text parts.
func callOutput(param string, it *inputItem) (string, error) {
	if it.CallID == "" {
		return "", badParam(param+".call_id", param+".call_id: field required")
	}
	if isNull(it.Output) {
		return "", badParam(param+".output", param+".output: field required")
	}
	if it.Output[0] == '"' {
		var s string
		err := json.Unmarshal(it.Output, &s)
		if err != nil {
			return "", badParam(param+".output", param+".output: "+err.Error())
		}
		return s, nil
	}
	var parts []contentPart
	if err := json.Unmarshal(it.Output, &parts); err != nil {
		return "", badParam(param+".output", param+".output must be a string or a list of parts")
	}
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		if p.Type != "input_text" && p.Type != "output_text" {
			return "", badParam(param+".output", fmt.Sprintf("%s.output: %s parts are not supported; the workers are text-only", param, p.Type))
		}
		texts = append(texts, p.Text)
	}
	return strings.Join(texts, "\n\n"), nil
}

// nameToolResults fills the tool name of each result in input from the call
// it answers, found in input or in the stored history before it; workers
// that render results by name need it, and function_call_output omits it.
func nameToolResults(history, input []pool.Message) {
	for i := range input {
		if input[i].Role != pool.RoleTool || input[i].Name != "" {
			continue
		}
		if name := callName(input[:i], input[i].ToolCallID); name != "" {
			input[i].Name = name
		} else {
			input[i].Name = callName(history, input[i].ToolCallID)
		}
	}
}

func callName(msgs []pool.Message, callID string) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		for _, tc := range msgs[i].ToolCalls {
			if tc.ID == callID {
				return tc.Name
			}
		}
	}
	return ""
}

func decodeTools(raw []json.RawMessage) ([]pool.Tool, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	out := make([]pool.Tool, 0, len(raw))
	for i, r := range raw {
		param := fmt.Sprintf("tools[%d]", i)
		var t functionTool
		if err := json.Unmarshal(r, &t); err != nil {
			return nil, badParam(param, param+" must be a tool object")
		}
		if t.Type != "function" {
			return nil, badParam(param+".type", fmt.Sprintf("%s: tool type %q is not supported; only function tools are", param, t.Type))
		}
		if t.Name == "" {
			return nil, badParam(param+".name", param+".name: field required")
		}
		out = append(out, pool.Tool{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
	}
	return out, nil
}

func decodeToolChoice(raw json.RawMessage, tools []pool.Tool) (pool.ToolChoice, error) {
	if isNull(raw) {
		return pool.ToolChoice{}, nil
	}
	if raw[0] == '"' {
		var s string
		_ = json.Unmarshal(raw, &s)
		switch s {
		case "auto":
			return pool.ToolChoice{Mode: pool.ToolAuto}, nil
		case "none":
			return pool.ToolChoice{Mode: pool.ToolNone}, nil
		case "required":
			return pool.ToolChoice{Mode: pool.ToolRequired}, nil
		}
		return pool.ToolChoice{}, badParam("tool_choice", fmt.Sprintf("tool_choice %q must be auto, none, required or a function", s))
	}
	var tc struct{ Type, Name string }
	if err := json.Unmarshal(raw, &tc); err != nil {
		return pool.ToolChoice{}, badParam("tool_choice", "tool_choice must be a string or an object")
	}
	if tc.Type != "function" {
		return pool.ToolChoice{}, badParam("tool_choice", fmt.Sprintf("tool_choice type %q is not supported; use auto, none, required or a function", tc.Type))
	}
	for _, t := range tools {
		if t.Name == tc.Name {
			return pool.ToolChoice{Mode: pool.ToolNamed, Name: tc.Name}, nil
		}
	}
	return pool.ToolChoice{}, badParam("tool_choice", fmt.Sprintf("tool_choice names function %q, which is not in tools", tc.Name))
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

func idOr(id, prefix string) string {
	if id != "" {
		return id
	}
	return newID(prefix)
}
