package sim

import (
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/poolgate/poolgate/internal/lingmarpc"
)

// Deviations are ways --deviate makes the simulator differ from the
// evidence, each as a real worker might: a check of a real worker
// (poolgate doctor) is tested by showing it reports them.
var Deviations = []string{
	// errorMsg names the error text errorMsg, as earlier notes had it.
	"errorMsg",
	// no-normal refuses the ask mode "normal".
	"no-normal",
	// no-finish never sends chat/finish: a turn ends at its last step
	// callback.
	"no-finish",
	// tool-shape asks for a built-in tool with toolName and no async.
	"tool-shape",
	// new-session gives a follow-up (isReply) a new session.
	"new-session",
	// extra-listener opens a listener no start flag names, as the real
	// worker's profile websocket.
	"extra-listener",
	// bare-json answers a bare JSON message the real worker refuses.
	"bare-json",
}

// parseDeviations reads --deviate's comma-separated names.
func parseDeviations(s string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, d := range strings.Split(s, ",") {
		if d = strings.TrimSpace(d); d == "" {
			continue
		}
		if !slices.Contains(Deviations, d) {
			return nil, fmt.Errorf("--deviate=%s: want some of %s", d, strings.Join(Deviations, ", "))
		}
		out[d] = true
	}
	return out, nil
}

// errKey is the name of a reply's error text.
func (s *Sim) errKey() string {
	if s.cfg.Deviate["errorMsg"] {
		return "errorMsg"
	}
	return "errorMessage"
}

// finishBody is chat/finish's params, with the error text under errKey.
func (s *Sim) finishBody(fin finishParams) any {
	if !s.cfg.Deviate["errorMsg"] || fin.ErrorMessage == "" {
		return fin
	}
	b, _ := json.Marshal(fin) // a struct of plain fields always encodes
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	m["errorMsg"] = m["errorMessage"]
	delete(m, "errorMessage")
	return m
}

// invokeBody is a built-in tool call's tool/invoke params.
func (s *Sim) invokeBody(inv toolInvoke) any {
	if !s.cfg.Deviate["tool-shape"] {
		return inv
	}
	return map[string]any{"requestId": inv.RequestID, "sessionId": inv.SessionID, "toolCallId": inv.ToolCallID,
		"toolName": inv.Name, "parameters": inv.Parameters}
}

// extraListener opens the listener of the extra-listener deviation.
func (s *Sim) extraListener() (net.Listener, error) {
	if !s.cfg.Deviate["extra-listener"] {
		return nil, nil
	}
	return listenLoopback(0)
}

// bareJSON handles a bare JSON message as the bare-json deviation does:
// it is taken as a frame's body.
func (c *conn) bareJSON(buf []byte) bool {
	if !c.s.cfg.Deviate["bare-json"] {
		return false
	}
	m, err := lingmarpc.Decode(buf)
	if err != nil {
		return false
	}
	c.handle(m)
	return true
}
