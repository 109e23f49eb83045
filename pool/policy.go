package pool

import (
	"fmt"
	"slices"
	"strings"
)

// PolicyError is a request the operator's policy refuses (a forced tool
// outside the allowlist): the caller's mistake, answered 400 in its protocol.
type PolicyError struct {
	Message string
	// Param is the request field at fault, e.g. "tool_choice".
	Param string
}

func (e *PolicyError) Error() string { return e.Message }

// ToolPolicy is the operator's say over the tools requests offer.
type ToolPolicy struct {
	// Allow names the tools that may be offered to workers; empty allows all.
	Allow map[string]bool
	// Off offers no tools at all: workers answer text only.
	Off bool
}

// apply narrows req's tools to the policy. It returns a *PolicyError when
// the request forces a tool the policy takes away, since answering such a
// request with text would be silently wrong. The tools dropped are returned
// for the log.
func (p ToolPolicy) apply(req *ChatRequest) (dropped []string, err error) {
	if p.Off {
		if len(req.Tools) == 0 {
			return nil, nil
		}
		for _, t := range req.Tools {
			dropped = append(dropped, t.Name)
		}
		req.Tools, req.ToolChoice = nil, ToolChoice{}
		return dropped, nil
	}
	if len(p.Allow) == 0 {
		return nil, nil
	}
	if c := req.ToolChoice; c.Mode == ToolNamed && !p.Allow[c.Name] {
		return nil, &PolicyError{Param: "tool_choice",
			Message: fmt.Sprintf("tool %q is not allowed on this gateway (allowed: %s)", c.Name, p.names())}
	}
	kept := req.Tools[:0:0]
	for _, t := range req.Tools {
		if p.Allow[t.Name] {
			kept = append(kept, t)
		} else {
			dropped = append(dropped, t.Name)
		}
	}
	if len(dropped) == 0 {
		return nil, nil
	}
	if req.ToolChoice.Mode == ToolRequired && len(kept) == 0 {
		return nil, &PolicyError{Param: "tool_choice",
			Message: fmt.Sprintf("tool_choice requires a tool call, but none of the tools offered (%s) is allowed on this gateway (allowed: %s)",
				strings.Join(dropped, ", "), p.names())}
	}
	req.Tools = kept
	return dropped, nil
}

func (p ToolPolicy) names() string {
	names := make([]string, 0, len(p.Allow))
	for n := range p.Allow {
		names = append(names, n)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
