package lingma

import (
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/jsonx"
	"github.com/poolgate/poolgate/pool/textchat"
)

// The largest turn a worker takes. A frame over the worker's limit does not
// fail one turn: the worker drops its whole connection (the simulator, like
// coder/websocket, closes it with status 1009 "message too big"), so every
// turn on it fails and the worker is restarted. The driver therefore tells
// a turn's size before anything is sent (CheckTurn, which the router asks
// before it picks a worker) and never writes a frame over MaxFrame (call).

// promptCopies is how many times chat/ask carries the prompt: in
// questionText, and again in chatContext.text when ChatContext says so.
func (c *Config) promptCopies() int {
	if c.ChatContext == ContextPrompt {
		return 2
	}
	return 1
}

// askOverhead bounds what a chat/ask frame holds beside its strings: the
// Content-Length header, the JSON-RPC envelope, the field names and the
// fixed values (mode, task, flags, the native tool config's structure).
const askOverhead = 1024

// CheckTurn refuses, with a *chat.TooLargeError, a turn whose chat/ask frame
// would be larger than MaxFrame, whichever way the turn is sent (tools in
// the prompt, or natively when ToolMode allows it). It builds nothing: a
// first bound from the turn's lengths clears ordinary turns at once, and
// only a turn near the limit has its text scanned for the exact escaped
// size (invalid UTF-8 and control characters cost 6 bytes each once
// escaped; a U+FFFD the decoder put in their place, 3).
func (d *Driver) CheckTurn(t *chat.Turn) error { return d.cfg.checkTurn(t) }

// checkTurn is CheckTurn for a driver or a client of cfg.
func (c *Config) checkTurn(t *chat.Turn) error {
	if quickBound(t, c.promptCopies()) <= c.MaxFrame {
		return nil
	}
	if size := c.turnBound(t); size > c.MaxFrame {
		return &chat.TooLargeError{Size: size, Limit: c.MaxFrame}
	}
	return nil
}

// turnBound is an upper bound of the size of t's chat/ask frame, header
// included.
func (c *Config) turnBound(t *chat.Turn) int64 {
	// The requestId is the gateway's id plus a sequence number, or a
	// minted id when the turn has none.
	ids := jsonx.StringLen(t.RequestID) + len("-18446744073709551615") + len(newRequestID()) +
		jsonx.StringLen(t.SessionID) + jsonx.StringLen(t.Model)
	copies := c.promptCopies()
	size := copies * textchat.JSONBound(t, false)
	if c.ToolMode != ToolsEmulated && len(t.Tools) > 0 {
		native := copies*textchat.JSONBound(t, true) + jsonx.StringLen(t.ToolChoice.Name)
		for _, tl := range t.Tools {
			native += 64 + jsonx.StringLen(tl.Name) + jsonx.StringLen(tl.Description) + jsonx.StringLen(string(tl.Parameters))
		}
		size = max(size, native)
	}
	return int64(askOverhead + ids + size)
}

// quickBound is a cheaper bound than turnBound, from lengths alone: every
// byte of text at its most expensive (6 bytes escaped, 12 when escaped
// twice in the tools section) and generous room for each section's marker.
func quickBound(t *chat.Turn, copies int) int64 {
	var text, items, callName int64
	for i := range t.Messages {
		m := &t.Messages[i]
		text += int64(len(m.Content) + len(m.Role) + len(m.ToolCallID) + len(m.Name))
		items++
		for _, c := range m.ToolCalls {
			text += int64(len(c.Arguments) + len(c.ID) + len(c.Name))
			callName = max(callName, int64(len(c.Name)))
			items++
		}
	}
	var tools int64
	for _, tl := range t.Tools {
		tools += int64(len(tl.Name) + len(tl.Description) + len(tl.Parameters))
		items++
	}
	ids := int64(len(t.RequestID) + len(t.SessionID) + len(t.Model) + len(t.ToolChoice.Name) + 64)
	prompt := 4096 + 128*items + 7*text + 6*callName*items + 12*(tools+ids)
	return askOverhead + 6*ids + 6*tools + 64*items + int64(copies)*prompt
}
