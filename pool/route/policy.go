package route

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/poolgate/poolgate/internal/chat"
)

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
func (p ToolPolicy) apply(req *chat.Request) (dropped []string, err error) {
	if p.Off {
		if len(req.Tools) == 0 {
			return nil, nil
		}
		for _, t := range req.Tools {
			dropped = append(dropped, t.Name)
		}
		req.Tools, req.ToolChoice = nil, chat.ToolChoice{}
		return dropped, nil
	}
	if len(p.Allow) == 0 {
		return nil, nil
	}
	if c := req.ToolChoice; c.Mode == chat.ToolNamed && !p.Allow[c.Name] {
		return nil, &chat.PolicyError{Param: "tool_choice",
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
	if req.ToolChoice.Mode == chat.ToolRequired && len(kept) == 0 {
		return nil, &chat.PolicyError{Param: "tool_choice",
			Message: fmt.Sprintf("tool_choice requires a tool call, but none of the tools offered (%s) is allowed on this gateway (allowed: %s)",
				strings.Join(dropped, ", "), p.names())}
	}
	req.Tools = kept
	return dropped, nil
}

func (p ToolPolicy) names() string {
	return strings.Join(slices.Sorted(maps.Keys(p.Allow)), ", ")
}
