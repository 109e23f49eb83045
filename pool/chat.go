// Package pool owns poolgate's worker pool: the neutral chat model every
// protocol translates to and from, the supervisor that runs one worker process
// per account, the picker and the admission guard. Drivers for concrete worker
// protocols live in sub-packages (pool/lingma, pool/openai) behind Backend.
//
// pool knows nothing about HTTP frameworks; handlers translate wire JSON into
// ChatRequest and Event values and back.
package pool

import (
	"encoding/json"
	"strings"
	"time"
)

// Message roles of the neutral chat model.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is one turn of a transcript in the neutral model. Content is plain
// text: the workers are text-only, so protocols reject other media up front.
type Message struct {
	Role    string
	Content string
	// ToolCalls are the calls an assistant turn made.
	ToolCalls []ToolCall
	// ToolCallID names the call a RoleTool message answers.
	ToolCallID string
	// Name is the tool's name on a RoleTool message, when the protocol gives it.
	Name string
}

// ToolCall is one function call made by the model.
type ToolCall struct {
	ID   string
	Name string
	// Arguments is a JSON object as text (an empty object is "{}").
	Arguments string
}

// Tool is a function the caller offers to the model.
type Tool struct {
	Name        string
	Description string
	// Parameters is the JSON schema of the arguments (may be nil).
	Parameters json.RawMessage
}

// ToolChoiceMode says whether and which tool the model must call.
type ToolChoiceMode string

// Tool choice modes. The zero value means ToolAuto.
const (
	ToolAuto     ToolChoiceMode = ""
	ToolNone     ToolChoiceMode = "none"
	ToolRequired ToolChoiceMode = "required"
	ToolNamed    ToolChoiceMode = "named"
)

// ToolChoice is the caller's tool policy; Name is set for ToolNamed.
type ToolChoice struct {
	Mode ToolChoiceMode
	Name string
}

// Bounds every protocol holds a request to before it costs anything more
// than its decoding: an agent's longest sessions stay far below them, and
// above them the prompt could not fit any model's context anyway.
const (
	MaxMessages = 50_000
	MaxTools    = 1_000
)

// ChatRequest is a request in the neutral model, as a protocol handler hands it
// to the Router.
type ChatRequest struct {
	// RequestID is the gateway's request id (for logs and the worker turn id).
	RequestID string
	// Model is the name the client asked for; the router resolves it.
	Model    string
	Messages []Message
	Tools    []Tool
	// ToolChoice is ignored when Tools is empty.
	ToolChoice ToolChoice
	// MaxTokens caps the answer's output tokens; 0 means no cap.
	MaxTokens int
	// Stop lists stop sequences; no text past one is ever emitted.
	Stop        []string
	Temperature *float64
	TopP        *float64
	TopK        *int
	// Stream says the caller forwards events as they come. A non-streaming
	// request is buffered by the router, which may then retry a failure at any
	// point; a stream is retried only before its first event.
	Stream bool
	// APIKey identifies the caller for affinity keys; it is never logged.
	APIKey string
	// AffinityHint is the caller's stable conversation hint (the `user` field,
	// metadata.user_id); empty when the protocol has none.
	AffinityHint string
}

// EventType tells which fields of an Event are set.
type EventType uint8

// Event types. A stream ends with exactly one EventDone or EventError.
const (
	EventText EventType = iota + 1
	EventToolCall
	EventDone
	EventError
)

// FinishReason is why an answer ended.
type FinishReason string

// Finish reasons in the neutral model; protocols map them to their own names.
const (
	FinishStop         FinishReason = "stop"
	FinishLength       FinishReason = "length"
	FinishToolCalls    FinishReason = "tool_calls"
	FinishStopSequence FinishReason = "stop_sequence"
)

// Usage counts tokens of one turn.
type Usage struct {
	InputTokens  int
	OutputTokens int
}

// Event is one item of an answer stream.
type Event struct {
	Type EventType
	// Text is the delta of an EventText.
	Text string
	// ToolCall is the complete call of an EventToolCall.
	ToolCall ToolCall
	// Finish, Usage, StopSequence and SessionID are set on EventDone.
	Finish       FinishReason
	StopSequence string
	Usage        Usage
	// SessionID is the upstream session that served the turn (Lingma), for
	// reuse by a follow-up turn; empty for workers without sessions.
	SessionID string
	// Err is set on EventError.
	Err error
}

// Model is one model a worker serves.
type Model struct {
	ID   string
	Name string
}

// Turn is what the router asks of one worker: the neutral request narrowed to
// what the backend needs, with the upstream session to continue.
type Turn struct {
	RequestID string
	// Model is the backend's model key (resolved by the router).
	Model string
	// Messages is the whole transcript when SessionID is empty, else only the
	// messages after the turn the session already holds.
	Messages []Message
	// SessionID continues an upstream session; empty starts a new one.
	SessionID   string
	Tools       []Tool
	ToolChoice  ToolChoice
	MaxTokens   int
	Temperature *float64
	TopP        *float64
	// Agent says the request wants the worker's agent rather than plain
	// chat: it offers tools, carries tool calls or results, or asked for an
	// agent model by name. Workers without such a mode ignore it.
	Agent bool
}

// agentModels are model names that ask for the worker's agent mode.
var agentModels = map[string]bool{"lingma-agent": true, "agent": true}

// wantsAgent reports whether req calls for the worker's agent mode.
func wantsAgent(req *ChatRequest) bool {
	if len(req.Tools) > 0 || agentModels[strings.ToLower(req.Model)] {
		return true
	}
	for i := range req.Messages {
		if m := &req.Messages[i]; m.Role == RoleTool || len(m.ToolCalls) > 0 {
			return true
		}
	}
	return false
}

// AuthState is a worker's login state as its backend reports it.
type AuthState struct {
	LoggedIn bool
	// Account is the upstream account name or id, when known.
	Account string
}

// Cooldown is how long an instance is kept out of rotation.
type Cooldown struct {
	Until time.Time
}
