package chat

import "strconv"

// Bounds on stop sequences: every streamed delta is checked against each of
// them, so their number and length are a cost of every answer.
const (
	MaxStops     = 32
	MaxStopBytes = 512
)

// ValidationProblem says what is wrong with a field.
type ValidationProblem uint8

// Validation problems.
const (
	// Invalid: the field has a value the request can't be served with.
	Invalid ValidationProblem = iota
	// Missing: a field the rest of the request needs is absent or empty.
	Missing
)

// ValidationError is a request the neutral model refuses. It names the
// field at fault by its place in the neutral Request, which each protocol
// translates into its own field name (its messages, tools and their indices
// don't always line up with the neutral ones).
type ValidationError struct {
	// Field is the neutral field: "messages", "tools", "tool_choice",
	// "stop", "top_p", "top_k" or "max_tokens".
	Field string
	// Index is the element of Field at fault; -1 when the field as a whole is.
	Index int
	// Member is the part of the element at fault, as a path below it:
	// "name", "role", "tool_call_id", "tool_calls" or "tool_calls[2].name".
	// Empty for the element itself.
	Member  string
	Problem ValidationProblem
	// Message says what is wrong, without the path.
	Message string
}

// Path is the neutral path of the field at fault, e.g. "tools[3].name".
func (e *ValidationError) Path() string {
	p := e.Field
	if e.Index >= 0 {
		p += "[" + strconv.Itoa(e.Index) + "]"
	}
	if e.Member != "" {
		p += "." + e.Member
	}
	return p
}

func (e *ValidationError) Error() string { return e.Path() + ": " + e.Message }

func invalid(field string, index int, member, msg string) *ValidationError {
	return &ValidationError{Field: field, Index: index, Member: member, Problem: Invalid, Message: msg}
}

func missing(field string, index int, member, msg string) *ValidationError {
	return &ValidationError{Field: field, Index: index, Member: member, Problem: Missing, Message: msg}
}

// Validate checks what every protocol's request must hold once decoded:
// the bounds on messages, tools and stop sequences, roles and what each role
// may carry, tool names (present and unique), a tool_choice that the
// offered tools can satisfy, and the sampling values that mean the same in
// every protocol. A protocol's decoder checks only its wire shapes and
// leaves these to Validate. The error is a *ValidationError.
//
// tool_choice "auto" and "none" are valid with no tools (agents send "auto"
// on every turn); "required" or a named tool with no tools is refused, since
// the answer could not honour it.
func (r *Request) Validate() error {
	if err := validateMessages(r.Messages); err != nil {
		return err
	}
	if err := validateTools(r.Tools); err != nil {
		return err
	}
	if err := validateToolChoice(r.ToolChoice, r.Tools); err != nil {
		return err
	}
	if len(r.Stop) > MaxStops {
		return invalid("stop", -1, "", "at most "+strconv.Itoa(MaxStops)+" stop sequences are allowed, got "+strconv.Itoa(len(r.Stop)))
	}
	for i, s := range r.Stop {
		if len(s) > MaxStopBytes {
			return invalid("stop", i, "", "a stop sequence may be at most "+strconv.Itoa(MaxStopBytes)+" bytes")
		}
	}
	switch {
	case r.TopP != nil && !(*r.TopP >= 0 && *r.TopP <= 1):
		return invalid("top_p", -1, "", "must be between 0 and 1")
	case r.TopK != nil && *r.TopK < 0:
		return invalid("top_k", -1, "", "must be greater than or equal to 0")
	case r.MaxTokens < 0:
		return invalid("max_tokens", -1, "", "must not be negative")
	}
	return nil
}

func validateMessages(msgs []Message) error {
	switch {
	case len(msgs) == 0:
		return invalid("messages", -1, "", "at least one message is required")
	case len(msgs) > MaxMessages:
		return invalid("messages", -1, "", "at most "+strconv.Itoa(MaxMessages)+" messages are allowed, got "+strconv.Itoa(len(msgs)))
	}
	for i := range msgs {
		m := &msgs[i]
		switch m.Role {
		case RoleSystem, RoleUser, RoleAssistant:
		case RoleTool:
			if m.ToolCallID == "" {
				return missing("messages", i, "tool_call_id", "is required for tool messages")
			}
		default:
			return invalid("messages", i, "role", "unsupported role "+strconv.Quote(m.Role))
		}
		if len(m.ToolCalls) == 0 {
			continue
		}
		if m.Role != RoleAssistant {
			return invalid("messages", i, "tool_calls", "only assistant messages have tool calls")
		}
		for j := range m.ToolCalls {
			if m.ToolCalls[j].Name == "" {
				return missing("messages", i, "tool_calls["+strconv.Itoa(j)+"].name", "is required")
			}
		}
	}
	return nil
}

func validateTools(tools []Tool) error {
	if len(tools) > MaxTools {
		return invalid("tools", -1, "", "at most "+strconv.Itoa(MaxTools)+" tools are allowed, got "+strconv.Itoa(len(tools)))
	}
	// An agent offers a few dozen tools: comparing each with the ones
	// before it costs less than a map, which a long list still gets.
	var seen map[string]struct{}
	if len(tools) > smallToolList {
		seen = make(map[string]struct{}, len(tools))
	}
	for i := range tools {
		name := tools[i].Name
		if name == "" {
			return missing("tools", i, "name", "is required")
		}
		dup := false
		if seen != nil {
			_, dup = seen[name]
			seen[name] = struct{}{}
		} else {
			for j := range i {
				if tools[j].Name == name {
					dup = true
					break
				}
			}
		}
		if dup {
			return invalid("tools", i, "name", "duplicate tool name "+strconv.Quote(name))
		}
	}
	return nil
}

// smallToolList is the longest tool list checked for duplicates without a
// map.
const smallToolList = 64

func validateToolChoice(tc ToolChoice, tools []Tool) error {
	switch tc.Mode {
	case ToolAuto, ToolNone:
		return nil
	case ToolRequired:
		if len(tools) == 0 {
			return invalid("tool_choice", -1, "", "a forced tool call needs tools to choose from, and the request offers none")
		}
		return nil
	case ToolNamed:
		for i := range tools {
			if tools[i].Name == tc.Name {
				return nil
			}
		}
		return invalid("tool_choice", -1, "", "tool "+strconv.Quote(tc.Name)+" is not among the request's tools")
	}
	return invalid("tool_choice", -1, "", "unknown tool choice mode "+strconv.Quote(string(tc.Mode)))
}

// PromptTokens counts the prompt tokens of a transcript the way the router
// fills a turn's usage when the worker reports none: each message's text by
// count, plus four tokens of framing. Anthropic's count_tokens answers with
// it, so a count and the usage of the same request agree. Tool definitions
// and tool calls in the history are not counted (the router does not count
// them either).
func PromptTokens(msgs []Message, count func(string) int) int {
	n := 0
	for i := range msgs {
		n += count(msgs[i].Content) + 4
	}
	return n
}
