// Package chat is poolgate's neutral chat model: the request every protocol
// decodes into (Request, Message, Tool) and the checks every such request
// must pass (Request.Validate), the events every answer streams back
// (Event) and the one interface every answer is read through (Answer), what
// the router asks of one worker (Turn), the errors a turn can end in, and
// how a transcript's prompt tokens are counted (PromptTokens).
// It is a leaf: it imports nothing of poolgate's, so the protocols, the
// router and the drivers all speak it without importing each other.
package chat

import (
	"encoding/json"
	"errors"
	"fmt"
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

// Format is the shape the caller wants the answer's text in. The zero value
// is free text.
type Format struct {
	// JSON asks for an answer whose whole text is one JSON value.
	JSON bool
	// Schema is the JSON Schema that value should follow (nil: any JSON
	// value). It is a hint the worker is asked to follow, not a guarantee.
	Schema json.RawMessage
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

// Bounds every protocol holds a request to (Request.Validate checks them on
// the whole transcript, before the request reaches the router): an agent's
// longest sessions stay far below them, and above them the prompt could not
// fit any model's context anyway.
const (
	MaxMessages = 50_000
	MaxTools    = 1_000
)

// Request is a request in the neutral model, as a protocol handler hands it
// to the router.
type Request struct {
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
	// Owner keeps the caller's conversations apart from everyone else's in
	// affinity keys: a digest of its key (access.Owner), never the key.
	Owner string
	// AffinityHint is the caller's stable conversation hint (the `user` field,
	// metadata.user_id); empty when the protocol has none.
	AffinityHint string
	// Format is the shape the answer's text must take.
	Format Format
	// OneShot says nobody continues this conversation: an agent's side
	// request beside its turns (a classification, a check). The router
	// neither takes nor writes an affinity entry for it, so it never
	// continues, or steals, the session of the conversation it quotes, and
	// its upstream session is freed once it is answered.
	OneShot bool
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
	// SessionID is the upstream session that served the turn (for a driver with sessions), for
	// reuse by a follow-up turn; empty for workers without sessions.
	SessionID string
	// Err is set on EventError.
	Err error
}

// Model is one model a worker serves.
type Model struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Driver names the kind of worker (its driver setting) whose
	// accounts serve the model, as the pool lists it, comma-separated in
	// the rare pool where accounts of several kinds serve one model id:
	// the router fills it in; a worker's own list leaves it empty. A
	// string, so that a Model stays comparable.
	Driver string `json:"driver,omitempty"`
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
	// Format is the shape the answer's text must take (the request's).
	Format Format
	// Agent says the request wants the worker's agent rather than plain
	// chat: it offers tools, carries tool calls or results, or asked for an
	// agent model by name. Workers without such a mode ignore it.
	Agent bool
	// Whole says the caller waits for the whole answer before passing any
	// of it on (a non-streaming request), so a backend may ask its worker
	// for one body instead of a stream. The events are the same either way.
	Whole bool
}

// Errors of a turn that callers match with errors.Is.
var (
	// ErrNoInstance: no instance is ready to serve (all down, logging in,
	// draining or cooled down).
	ErrNoInstance = errors.New("no ready instance")
	// ErrNotLoggedIn: the worker has no valid login.
	ErrNotLoggedIn = errors.New("worker is not logged in")
	// ErrWorkerGone: the worker process or its connection went away mid-turn.
	ErrWorkerGone = errors.New("worker connection lost")
	// ErrNotSent marks a failure that came before the turn reached the
	// worker: its connection had already ended, or could not be made. The
	// turn cannot have caused it, so the router may try another worker; a
	// worker that went away while it was being sent a turn may have been
	// broken by that turn, and no second one is risked on it.
	ErrNotSent = errors.New("the turn was not sent to the worker")
)

// TooLargeError is a turn larger, as encoded for the worker, than the
// worker accepts. A driver refuses it before sending anything, and the
// router before any worker is picked: every worker of a kind has the same
// limit, and the turn must fit every kind its model routes to, so no other
// worker could take it either.
type TooLargeError struct {
	// Size is the turn's size in bytes as the driver would send it (an
	// upper bound when it was estimated); Limit the most the worker
	// accepts.
	Size, Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("the conversation is %d bytes as a worker receives it; the workers accept at most %d", e.Size, e.Limit)
}

// UnknownModelError is a request for a model no account of the pool
// serves, in a pool where such a name takes no default model
// (docs/routing.md): answered 404 in the caller's protocol, naming the
// models there are.
type UnknownModelError struct {
	// Model is the name the client asked for.
	Model string
	// Models are the ids of the models the pool serves.
	Models []string
}

func (e *UnknownModelError) Error() string {
	name := e.Model
	if len(name) > maxQuotedName {
		name = name[:maxQuotedName] + "..." // a name is the caller's, of any length
	}
	if len(e.Models) == 0 {
		return fmt.Sprintf("no account serves the model %q, and the pool lists no models yet", name)
	}
	return fmt.Sprintf("no account serves the model %q; the pool's models are %s", name, strings.Join(e.Models, ", "))
}

// maxQuotedName bounds how much of a name from a request an error quotes.
const maxQuotedName = 200

// OverloadedError is returned when the admission guard rejects a request.
type OverloadedError struct {
	// RetryAfter is an estimate of when a retry can be admitted.
	RetryAfter time.Duration
	Reason     string
}

func (e *OverloadedError) Error() string {
	return fmt.Sprintf("overloaded: %s (retry after %s)", e.Reason, e.RetryAfter.Round(time.Second))
}

// RateLimitedError is an upstream rate-limit or quota answer.
type RateLimitedError struct {
	// RetryAfter is the upstream's hint; 0 when it gave none.
	RetryAfter time.Duration
	Message    string
}

func (e *RateLimitedError) Error() string {
	return "upstream rate limited: " + e.Message
}

// UpstreamError is any other failure the worker reported for a turn.
type UpstreamError struct {
	// Status is the upstream's status code when it gave one (0 otherwise).
	Status  int
	Message string
}

func (e *UpstreamError) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("upstream error %d: %s", e.Status, e.Message)
	}
	return "upstream error: " + e.Message
}

// PolicyError is a request the operator's policy refuses (a forced tool
// outside the allowlist): the caller's mistake, answered 400 in its protocol.
type PolicyError struct {
	Message string
	// Param is the request field at fault, e.g. "tool_choice".
	Param string
}

func (e *PolicyError) Error() string { return e.Message }
