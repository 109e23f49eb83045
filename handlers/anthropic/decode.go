package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/poolgate/poolgate/pool"
)

// messagesRequest is the wire body of POST /v1/messages (and, minus the
// sampling fields, of count_tokens). Fields the gateway ignores on purpose
// (thinking, service_tier, cache_control on blocks, context_management) are
// simply not decoded: they do not change what a text-only worker answers.
type messagesRequest struct {
	Model         string          `json:"model"`
	MaxTokens     *int            `json:"max_tokens"`
	System        json.RawMessage `json:"system"`
	Messages      []wireMessage   `json:"messages"`
	Tools         []wireTool      `json:"tools"`
	ToolChoice    *wireToolChoice `json:"tool_choice"`
	StopSequences []string        `json:"stop_sequences"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int            `json:"top_k"`
	Stream        bool            `json:"stream"`
	Metadata      *struct {
		UserID string `json:"user_id"`
	} `json:"metadata"`
	MCPServers []json.RawMessage `json:"mcp_servers"`
	Container  json.RawMessage   `json:"container"`
}

type wireMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// wireBlock is any content block; Type says which fields are meaningful.
type wireBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

type wireTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

type wireToolChoice struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

// requestError is a client error: it becomes a 400 invalid_request_error.
type requestError struct{ msg string }

func (e *requestError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &requestError{msg: fmt.Sprintf(format, args...)}
}

// decodeMessages parses and validates a Messages body into the neutral model.
// forCount relaxes the fields count_tokens does not take (max_tokens).
func decodeMessages(body []byte, forCount bool) (*messagesRequest, *pool.ChatRequest, error) {
	var in messagesRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, nil, badRequest("invalid JSON body: %v", err)
	}
	if err := in.validate(forCount); err != nil {
		return nil, nil, err
	}
	out := &pool.ChatRequest{
		Model:       in.Model,
		Stop:        in.StopSequences,
		Temperature: in.Temperature,
		TopP:        in.TopP,
		TopK:        in.TopK,
		Stream:      in.Stream,
	}
	if in.MaxTokens != nil {
		out.MaxTokens = *in.MaxTokens
	}
	if in.Metadata != nil {
		out.AffinityHint = in.Metadata.UserID
	}
	sys, err := decodeSystem(in.System)
	if err != nil {
		return nil, nil, err
	}
	if sys != "" {
		out.Messages = append(out.Messages, pool.Message{Role: pool.RoleSystem, Content: sys})
	}
	for i := range in.Messages {
		if out.Messages, err = appendMessage(out.Messages, i, &in.Messages[i]); err != nil {
			return nil, nil, err
		}
	}
	if out.Tools, err = decodeTools(in.Tools); err != nil {
		return nil, nil, err
	}
	if out.ToolChoice, err = decodeToolChoice(in.ToolChoice, out.Tools); err != nil {
		return nil, nil, err
	}
	return &in, out, nil
}

func (in *messagesRequest) validate(forCount bool) error {
	switch {
	case in.Model == "":
		return badRequest("model: field required")
	case !forCount && in.MaxTokens == nil:
		return badRequest("max_tokens: field required")
	case !forCount && *in.MaxTokens < 1:
		return badRequest("max_tokens: must be greater than or equal to 1")
	case len(in.Messages) == 0:
		return badRequest("messages: at least one message is required")
	case in.Temperature != nil && (*in.Temperature < 0 || *in.Temperature > 1):
		return badRequest("temperature: must be between 0 and 1")
	case in.TopP != nil && (*in.TopP < 0 || *in.TopP > 1):
		return badRequest("top_p: must be between 0 and 1")
	case in.TopK != nil && *in.TopK < 0:
		return badRequest("top_k: must be greater than or equal to 0")
	case len(in.MCPServers) > 0:
		return badRequest("mcp_servers: MCP connectors are not supported by this gateway")
	case len(in.Container) > 0 && string(in.Container) != "null":
		return badRequest("container: code execution containers are not supported by this gateway")
	}
	for i, s := range in.StopSequences {
		if strings.TrimSpace(s) == "" {
			return badRequest("stop_sequences.%d: each stop sequence must contain non-whitespace", i)
		}
	}
	if last := in.Messages[len(in.Messages)-1]; last.Role == "assistant" {
		return badRequest("messages.%d: a final assistant message (prefill) is not supported by this gateway", len(in.Messages)-1)
	}
	return nil
}

// decodeSystem accepts a string or a list of text blocks.
func decodeSystem(raw json.RawMessage) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", badRequest("system: %v", err)
		}
		return s, nil
	}
	var blocks []wireBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", badRequest("system: must be a string or a list of text blocks")
	}
	parts := make([]string, 0, len(blocks))
	for i, b := range blocks {
		if b.Type != "text" {
			return "", badRequest("system.%d: block type %q is not supported; only text blocks are", i, b.Type)
		}
		parts = append(parts, b.Text)
	}
	return strings.Join(parts, "\n\n"), nil
}

// appendMessage translates one wire message. A user message's tool_result
// blocks become RoleTool messages ahead of its text, which is the order the
// neutral transcript (and every worker) expects.
func appendMessage(dst []pool.Message, i int, m *wireMessage) ([]pool.Message, error) {
	if m.Role != "user" && m.Role != "assistant" {
		return nil, badRequest("messages.%d.role: must be \"user\" or \"assistant\", got %q", i, m.Role)
	}
	if isNull(m.Content) {
		return nil, badRequest("messages.%d.content: field required", i)
	}
	if m.Content[0] == '"' {
		var s string
		if err := json.Unmarshal(m.Content, &s); err != nil {
			return nil, badRequest("messages.%d.content: %v", i, err)
		}
		return append(dst, pool.Message{Role: m.Role, Content: s}), nil
	}
	var blocks []wireBlock
	if err := json.Unmarshal(m.Content, &blocks); err != nil {
		return nil, badRequest("messages.%d.content: must be a string or a list of content blocks", i)
	}
	msg := pool.Message{Role: m.Role}
	var text strings.Builder
	for j := range blocks {
		b := &blocks[j]
		switch b.Type {
		case "text":
			if text.Len() > 0 {
				text.WriteString("\n\n")
			}
			text.WriteString(b.Text)
		case "tool_use":
			if m.Role != "assistant" {
				return nil, badRequest("messages.%d.content.%d: tool_use blocks belong in assistant messages", i, j)
			}
			call, err := toolUseCall(b, i, j)
			if err != nil {
				return nil, err
			}
			msg.ToolCalls = append(msg.ToolCalls, call)
		case "tool_result":
			if m.Role != "user" {
				return nil, badRequest("messages.%d.content.%d: tool_result blocks belong in user messages", i, j)
			}
			res, err := toolResult(b, i, j)
			if err != nil {
				return nil, err
			}
			dst = append(dst, res)
		case "thinking", "redacted_thinking":
			// Earlier turns' reasoning: the workers neither produce nor read it.
		case "image", "document", "search_result", "container_upload":
			return nil, badRequest("messages.%d.content.%d: %s blocks are not supported; the workers are text-only", i, j, b.Type)
		default:
			return nil, badRequest("messages.%d.content.%d: unsupported content block type %q", i, j, b.Type)
		}
	}
	msg.Content = text.String()
	if msg.Content == "" && len(msg.ToolCalls) == 0 {
		return dst, nil // a user turn made only of tool results
	}
	return append(dst, msg), nil
}

func toolUseCall(b *wireBlock, i, j int) (pool.ToolCall, error) {
	if b.ID == "" || b.Name == "" {
		return pool.ToolCall{}, badRequest("messages.%d.content.%d: tool_use needs id and name", i, j)
	}
	args := "{}"
	if !isNull(b.Input) {
		if b.Input[0] != '{' {
			return pool.ToolCall{}, badRequest("messages.%d.content.%d.input: must be an object", i, j)
		}
		args = string(b.Input)
	}
	return pool.ToolCall{ID: b.ID, Name: b.Name, Arguments: args}, nil
}

func toolResult(b *wireBlock, i, j int) (pool.Message, error) {
	if b.ToolUseID == "" {
		return pool.Message{}, badRequest("messages.%d.content.%d.tool_use_id: field required", i, j)
	}
	content, err := toolResultContent(b.Content, i, j)
	if err != nil {
		return pool.Message{}, err
	}
	if b.IsError {
		// The neutral model has no error flag; say it in the text the worker reads.
		content = "Error: " + content
	}
	return pool.Message{Role: pool.RoleTool, ToolCallID: b.ToolUseID, Content: content}, nil
}

func toolResultContent(raw json.RawMessage, i, j int) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", badRequest("messages.%d.content.%d.content: %v", i, j, err)
		}
		return s, nil
	}
	var blocks []wireBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", badRequest("messages.%d.content.%d.content: must be a string or a list of text blocks", i, j)
	}
	parts := make([]string, 0, len(blocks))
	for k, b := range blocks {
		if b.Type != "text" {
			return "", badRequest("messages.%d.content.%d.content.%d: %s blocks are not supported in tool results; the workers are text-only", i, j, k, b.Type)
		}
		parts = append(parts, b.Text)
	}
	return strings.Join(parts, "\n\n"), nil
}

func decodeTools(in []wireTool) ([]pool.Tool, error) {
	if len(in) == 0 {
		return nil, nil
	}
	out := make([]pool.Tool, 0, len(in))
	for i, t := range in {
		if t.Type != "" && t.Type != "custom" {
			return nil, badRequest("tools.%d.type: server tool %q is not supported; only custom (client) tools are", i, t.Type)
		}
		if t.Name == "" {
			return nil, badRequest("tools.%d.name: field required", i)
		}
		if isNull(t.InputSchema) {
			return nil, badRequest("tools.%d.input_schema: field required", i)
		}
		out = append(out, pool.Tool{Name: t.Name, Description: t.Description, Parameters: t.InputSchema})
	}
	return out, nil
}

func decodeToolChoice(tc *wireToolChoice, tools []pool.Tool) (pool.ToolChoice, error) {
	if tc == nil {
		return pool.ToolChoice{}, nil
	}
	switch tc.Type {
	case "auto":
		return pool.ToolChoice{Mode: pool.ToolAuto}, nil
	case "none":
		return pool.ToolChoice{Mode: pool.ToolNone}, nil
	case "any":
		if len(tools) == 0 {
			return pool.ToolChoice{}, badRequest("tool_choice: \"any\" requires tools")
		}
		return pool.ToolChoice{Mode: pool.ToolRequired}, nil
	case "tool":
		for _, t := range tools {
			if t.Name == tc.Name {
				return pool.ToolChoice{Mode: pool.ToolNamed, Name: tc.Name}, nil
			}
		}
		return pool.ToolChoice{}, badRequest("tool_choice.name: no tool named %q in tools", tc.Name)
	default:
		return pool.ToolChoice{}, badRequest("tool_choice.type: must be one of auto, any, tool, none; got %q", tc.Type)
	}
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}
