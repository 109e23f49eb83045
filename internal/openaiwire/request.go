// Package openaiwire is the OpenAI chat-completions wire format: the body of
// POST /v1/chat/completions with its messages, tools and tool calls, the
// answer's shapes, and a one-pass reader for requests of the common shape.
// The chat protocol reads requests in it at the edge, the simulator reads
// them as a model server does, and the model-server driver writes them; each
// keeps its own rules (what it rejects, what it sends) on top.
package openaiwire

import "encoding/json"

// Request is the body of a chat completion request. M is its message type:
// Message where a request is read (any content shape a client may send),
// TextMessage where the model-server driver writes one (text content).
//
// Fields a reader cannot honour are still typed, so a reader can reject them
// by name and a value of the wrong type is a decoding error; the drop-ins
// agents send (reasoning_effort, thinking, ...) are kept raw, whatever their
// type. Unknown fields are ignored. The first fields are in the order the
// model-server driver has always written them; every field but messages is
// left out of an encoding when empty.
type Request[M any] struct {
	Model               string            `json:"model,omitempty"`
	Messages            []M               `json:"messages"`
	Stream              *bool             `json:"stream,omitempty"`
	StreamOptions       *StreamOptions    `json:"stream_options,omitempty"`
	Tools               []Tool            `json:"tools,omitempty"`
	ToolChoice          json.RawMessage   `json:"tool_choice,omitempty"`
	MaxTokens           *int              `json:"max_tokens,omitempty"`
	Temperature         *float64          `json:"temperature,omitempty"`
	TopP                *float64          `json:"top_p,omitempty"`
	ResponseFormat      *ResponseFormat   `json:"response_format,omitempty"`
	MaxCompletionTokens *int              `json:"max_completion_tokens,omitempty"`
	Stop                json.RawMessage   `json:"stop,omitempty"`
	FrequencyPenalty    *float64          `json:"frequency_penalty,omitempty"`
	PresencePenalty     *float64          `json:"presence_penalty,omitempty"`
	N                   *int              `json:"n,omitempty"`
	User                string            `json:"user,omitempty"`
	Seed                *int64            `json:"seed,omitempty"`
	ParallelToolCalls   *bool             `json:"parallel_tool_calls,omitempty"`
	ServiceTier         *string           `json:"service_tier,omitempty"`
	Metadata            map[string]string `json:"metadata,omitempty"`
	Store               *bool             `json:"store,omitempty"`
	Logprobs            *bool             `json:"logprobs,omitempty"`
	TopLogprobs         *int              `json:"top_logprobs,omitempty"`
	Audio               json.RawMessage   `json:"audio,omitempty"`
	Modalities          []string          `json:"modalities,omitempty"`
	Prediction          json.RawMessage   `json:"prediction,omitempty"`
	Functions           json.RawMessage   `json:"functions,omitempty"`
	FunctionCall        json.RawMessage   `json:"function_call,omitempty"`

	// Sent routinely by coding agents and OpenAI-compatible servers'
	// clients; no worker can honour them, so readers drop them visibly.
	ReasoningEffort    json.RawMessage `json:"reasoning_effort,omitempty"`
	Reasoning          json.RawMessage `json:"reasoning,omitempty"`
	EnableThinking     json.RawMessage `json:"enable_thinking,omitempty"`
	ThinkingBudget     json.RawMessage `json:"thinking_budget,omitempty"`
	Thinking           json.RawMessage `json:"thinking,omitempty"`
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs,omitempty"`
	WebSearchOptions   json.RawMessage `json:"web_search_options,omitempty"`
	Verbosity          json.RawMessage `json:"verbosity,omitempty"`
}

// StreamOptions are a streamed request's options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// ResponseFormat asks for the answer's format: text, json_object or
// json_schema.
type ResponseFormat struct {
	Type       string      `json:"type"`
	JSONSchema *JSONSchema `json:"json_schema,omitempty"`
}

// JSONSchema is a json_schema response format.
type JSONSchema struct {
	// Name is kept raw: a reader ignores it whatever its type, and a
	// writer sets it to a JSON string.
	Name   json.RawMessage `json:"name,omitempty"`
	Strict *bool           `json:"strict,omitempty"`
	Schema json.RawMessage `json:"schema"`
}

// Message is a message as a server reads it.
type Message struct {
	Role string `json:"role"`
	// Content is a string, an array of content parts (Part) or null.
	Content      json.RawMessage `json:"content"`
	Name         string          `json:"name,omitempty"`
	ToolCalls    []ToolCall      `json:"tool_calls,omitempty"`
	ToolCallID   string          `json:"tool_call_id,omitempty"`
	Refusal      *string         `json:"refusal,omitempty"`
	FunctionCall json.RawMessage `json:"function_call,omitempty"`
	// ReasoningContent is an earlier turn's reasoning (DeepSeek and Qwen
	// style); no worker makes or reads it.
	ReasoningContent json.RawMessage `json:"reasoning_content,omitempty"`
}

// TextMessage is a message as the model-server driver writes it: its
// content is text, written straight from a string (a json.RawMessage would
// be scanned once more by encoding/json, and a transcript is most of a
// request).
type TextMessage struct {
	Role string `json:"role"`
	// Content is null on an assistant turn that only calls tools.
	Content    *string    `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	Name       string     `json:"name,omitempty"`
}

// Part is one element of an array of content parts.
type Part struct {
	Type         string          `json:"type"`
	Text         *string         `json:"text"`
	Refusal      *string         `json:"refusal"`
	CacheControl json.RawMessage `json:"cache_control"`
}

// ToolCall is a call an assistant message made, or makes in an answer.
type ToolCall struct {
	ID       string   `json:"id"`
	Type     string   `json:"type"`
	Function Function `json:"function"`
}

// Function is the function a tool call calls; Arguments is JSON text.
type Function struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Tool is a tool a request offers.
type Tool struct {
	Type     string        `json:"type"`
	Function *ToolFunction `json:"function"`
}

// ToolFunction is the function a tool offers; Parameters is a JSON schema.
type ToolFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict,omitempty"`
}

// NamedToolChoice is a tool_choice that names a function.
type NamedToolChoice struct {
	Type     string `json:"type"`
	Function *struct {
		Name string `json:"name"`
	} `json:"function"`
}
