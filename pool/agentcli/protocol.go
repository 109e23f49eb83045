package agentcli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync/atomic"
)

// The stream-json protocol as this package models it: what an agent CLI
// prints on its standard output (one JSON object a line) and what it reads
// on its standard input. docs/claude-code-worker.md says, point by point,
// where each part was learnt (the real binary here, or the SDK's types).

// Message types an agent CLI prints (the "type" field).
const (
	TypeSystem          = "system"
	TypeAssistant       = "assistant"
	TypeUser            = "user"
	TypeResult          = "result"
	TypeStreamEvent     = "stream_event"
	TypeControlRequest  = "control_request"
	TypeControlResponse = "control_response"
	TypeControlCancel   = "control_cancel_request"
	TypeKeepAlive       = "keep_alive"
	TypeRateLimit       = "rate_limit_event"
	TypeReset           = "conversation_reset"
)

// Subtypes of the messages the driver acts on.
const (
	SubtypeInit     = "init"
	SubtypeSuccess  = "success"
	SubtypeAPIRetry = "api_retry"
)

// Message is one line an agent CLI printed, with the fields the driver
// reads; the rest of the line is not kept.
type Message struct {
	Type      string `json:"type"`
	Subtype   string `json:"subtype,omitempty"`
	SessionID string `json:"session_id,omitempty"`

	// assistant and user: the API message, whose subagent (nil: the
	// main thread) and error (SDKAssistantMessageError) it is.
	Message         *APIMessage `json:"message,omitempty"`
	ParentToolUseID *string     `json:"parent_tool_use_id,omitempty"`
	Error           string      `json:"error,omitempty"`

	// stream_event: one event of the Messages API's stream.
	Event *StreamEvent `json:"event,omitempty"`

	// system/init: the tools the session has and its model.
	Tools []string `json:"tools,omitempty"`
	Model string   `json:"model,omitempty"`

	// result: how the turn ended.
	IsError        bool     `json:"is_error,omitempty"`
	Result         *string  `json:"result,omitempty"`
	StopReason     *string  `json:"stop_reason,omitempty"`
	Usage          *Usage   `json:"usage,omitempty"`
	APIErrorStatus *int     `json:"api_error_status,omitempty"`
	Errors         []string `json:"errors,omitempty"`
	TerminalReason string   `json:"terminal_reason,omitempty"`

	// control_request (either way), control_response, control_cancel_request.
	RequestID string           `json:"request_id,omitempty"`
	Request   *ControlRequest  `json:"request,omitempty"`
	Response  *ControlResponse `json:"response,omitempty"`

	// rate_limit_event.
	RateLimitInfo *RateLimitInfo `json:"rate_limit_info,omitempty"`

	// conversation_reset: the session the conversation continues in.
	NewConversationID string `json:"new_conversation_id,omitempty"`
}

// APIMessage is a Messages API message as the CLI relays it.
type APIMessage struct {
	ID      string          `json:"id,omitempty"`
	Role    string          `json:"role"`
	Model   string          `json:"model,omitempty"`
	Content json.RawMessage `json:"content"`
}

// Block is one content block of an API message.
type Block struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
}

// Text is the message's text: a string content, or its text blocks
// joined.
func (m *APIMessage) Text() string {
	c := bytes.TrimSpace(m.Content)
	if len(c) > 0 && c[0] == '"' {
		var s string
		_ = json.Unmarshal(c, &s)
		return s
	}
	var blocks []Block
	_ = json.Unmarshal(c, &blocks)
	var out string
	for _, b := range blocks {
		if b.Type == "text" {
			out += b.Text
		}
	}
	return out
}

// StreamEvent is one event of the Messages API's stream (message_start,
// content_block_start, content_block_delta, content_block_stop,
// message_delta, message_stop), with the fields the driver reads.
type StreamEvent struct {
	Type    string      `json:"type"`
	Message *APIMessage `json:"message,omitempty"`
	Delta   *struct {
		Type       string  `json:"type"`
		Text       string  `json:"text,omitempty"`
		StopReason *string `json:"stop_reason,omitempty"`
	} `json:"delta,omitempty"`
}

// Usage is a result's token counts.
type Usage struct {
	InputTokens              int `json:"input_tokens"`
	OutputTokens             int `json:"output_tokens"`
	CacheCreationInputTokens int `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int `json:"cache_read_input_tokens"`
}

// ControlRequest is the body of a control_request.
type ControlRequest struct {
	Subtype string `json:"subtype"`
	// Model is set_model's.
	Model *string `json:"model,omitempty"`
	// ToolName is can_use_tool's.
	ToolName string `json:"tool_name,omitempty"`
}

// ControlResponse is the body of a control_response.
type ControlResponse struct {
	Subtype   string          `json:"subtype"` // success or error
	RequestID string          `json:"request_id"`
	Response  json.RawMessage `json:"response,omitempty"`
	Error     string          `json:"error,omitempty"`
}

// RateLimitInfo is a rate_limit_event's: rejected means the account is
// throttled until ResetsAt (Unix seconds; 0 when not said).
type RateLimitInfo struct {
	Status   string `json:"status"`
	ResetsAt int64  `json:"resetsAt,omitempty"`
}

// Vocabulary is the set of message types, and system subtypes, that an
// agent CLI may print: the lines the driver acts on and the ones it knows
// and leaves alone. A line outside it is logged and counted, never dropped
// silently.
type Vocabulary struct {
	Types          map[string]bool
	SystemSubtypes map[string]bool
}

// Knows reports whether m is in the vocabulary.
func (v Vocabulary) Knows(m *Message) bool {
	if !v.Types[m.Type] {
		return false
	}
	return m.Type != TypeSystem || v.SystemSubtypes[m.Subtype]
}

// With returns a copy of v with more types and system subtypes (a
// dialect's own).
func (v Vocabulary) With(types, systemSubtypes []string) Vocabulary {
	out := Vocabulary{Types: map[string]bool{}, SystemSubtypes: map[string]bool{}}
	maps.Copy(out.Types, v.Types)
	maps.Copy(out.SystemSubtypes, v.SystemSubtypes)
	for _, t := range types {
		out.Types[t] = true
	}
	for _, s := range systemSubtypes {
		out.SystemSubtypes[s] = true
	}
	return out
}

// StdoutVocabulary is what the Agent SDK's types say a CLI prints
// (StdoutMessage: its SDKMessage union and the control protocol): the
// messages the driver reads and the ones it leaves alone.
func StdoutVocabulary() Vocabulary {
	return Vocabulary{}.With([]string{
		TypeSystem, TypeAssistant, TypeUser, TypeResult, TypeStreamEvent, TypeControlRequest,
		TypeControlResponse, TypeControlCancel, TypeKeepAlive, TypeRateLimit, TypeReset,
		"tool_progress", "tool_use_summary", "auth_status", "prompt_suggestion", "active_goal",
	}, []string{
		SubtypeInit, SubtypeAPIRetry, "status", "compact_boundary", "control_request_progress",
		"model_refusal_fallback", "model_refusal_no_fallback", "local_command_output", "hook_started",
		"hook_progress", "hook_response", "plugin_install", "task_notification", "task_started", "task_updated",
		"task_progress", "background_tasks_changed", "thinking_tokens", "session_state_changed",
		"worker_shutting_down", "commands_changed", "notification", "files_persisted", "memory_recall",
		"elicitation_complete", "permission_denied", "mirror_error", "informational", "session_writes_lost",
	})
}

// Errors of Parse.
var (
	// ErrUnparsed: the line is not one JSON object with a type.
	ErrUnparsed = errors.New("not a stream-json message")
	// ErrUnknown: the line is a message outside the vocabulary.
	ErrUnknown = errors.New("a message type outside the protocol model")
)

// Parse reads one line an agent CLI printed against v. An unparsed line
// or an unknown message is an error (wrapping ErrUnparsed or ErrUnknown);
// an unknown one is returned parsed too.
func Parse(line []byte, v Vocabulary) (*Message, error) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] != '{' {
		return nil, fmt.Errorf("%w: %s", ErrUnparsed, Clip(string(line)))
	}
	m := new(Message)
	err := json.Unmarshal(line, m)
	if err != nil {
		// A field of another shape in a message whose fields the driver
		// does not read is no deviation: only its type counts.
		var env struct {
			Type    string `json:"type"`
			Subtype string `json:"subtype"`
		}
		if json.Unmarshal(line, &env) != nil || reads(env.Type, env.Subtype) {
			return nil, fmt.Errorf("%w: %v: %s", ErrUnparsed, err, Clip(string(line)))
		}
		m = &Message{Type: env.Type, Subtype: env.Subtype}
	}
	if m.Type == "" {
		return nil, fmt.Errorf("%w (no type): %s", ErrUnparsed, Clip(string(line)))
	}
	if !v.Knows(m) {
		return m, fmt.Errorf("%w: type %q subtype %q", ErrUnknown, m.Type, m.Subtype)
	}
	return m, nil
}

// reads reports whether the driver reads fields of a message of this type
// beyond its type.
func reads(typ, subtype string) bool {
	switch typ {
	case TypeAssistant, TypeResult, TypeStreamEvent, TypeControlRequest, TypeControlResponse, TypeRateLimit, TypeReset:
		return true
	case TypeSystem:
		return subtype == SubtypeInit
	}
	return false
}

// Clip shortens what a CLI printed to its first 200 bytes, for an error.
func Clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// Stats count the lines a driver's workers printed: every one, and those
// outside the protocol model (unknown messages, unparsed lines), which
// are logged as well. Tests read them.
type Stats struct {
	Lines, Unknown, Unparsed atomic.Int64
}

// count notes a line and what Parse made of it.
func (s *Stats) count(err error) {
	s.Lines.Add(1)
	switch {
	case errors.Is(err, ErrUnknown):
		s.Unknown.Add(1)
	case errors.Is(err, ErrUnparsed):
		s.Unparsed.Add(1)
	}
}
