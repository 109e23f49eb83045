package openaiwire

// Completion is a whole (non-streamed) answer, a chat.completion.
type Completion struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []Choice `json:"choices"`
	Usage   Usage    `json:"usage"`
}

// Choice is one of a Completion's answers (the gateway makes one).
type Choice struct {
	Index        int               `json:"index"`
	Message      CompletionMessage `json:"message"`
	Logprobs     *struct{}         `json:"logprobs"`
	FinishReason string            `json:"finish_reason"`
}

// CompletionMessage is the assistant's message in a Choice; Content is null
// when it only calls tools.
type CompletionMessage struct {
	Role      string     `json:"role"`
	Content   *string    `json:"content"`
	Refusal   *string    `json:"refusal"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// Usage is an answer's token counts.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// ToolCallDelta is a piece of a tool call in a streamed chunk's delta: the
// first names the call (index, id, type, name), the next ones carry
// fragments of its arguments under the same index.
type ToolCallDelta struct {
	Index    *int          `json:"index,omitempty"`
	ID       string        `json:"id,omitempty"`
	Type     string        `json:"type,omitempty"`
	Function FunctionDelta `json:"function"`
}

// FunctionDelta is the function part of a ToolCallDelta.
type FunctionDelta struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}
