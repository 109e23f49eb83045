package modelserver

import (
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/jsonx"
)

// defaultMaxRequest is MaxRequest's default: far beyond any model's
// context window, and within what an HTTP server buffers without trouble.
const defaultMaxRequest = 16 << 20

// requestOverhead bounds what a request body holds beside its strings and
// each item's keys: the fixed fields and the stream options.
const requestOverhead = 512

// CheckTurn refuses, with a *chat.TooLargeError, a turn whose request body
// would be larger than MaxRequest. It encodes nothing: a first bound from
// the turn's lengths clears ordinary turns at once, and only a turn near
// the limit has its text scanned for the exact escaped size.
func (d *Driver) CheckTurn(t *chat.Turn) error {
	if quickBound(t) <= d.cfg.MaxRequest {
		return nil
	}
	if size := turnBound(t); size > d.cfg.MaxRequest {
		return &chat.TooLargeError{Size: size, Limit: d.cfg.MaxRequest}
	}
	return nil
}

// turnBound is an upper bound of the size of t's request body
// (newWireRequest, encoded with HTML escaping off).
func turnBound(t *chat.Turn) int64 {
	n := requestOverhead + jsonx.StringLen(t.Model) + jsonx.StringLen(t.ToolChoice.Name)
	for i := range t.Messages {
		m := &t.Messages[i]
		n += 64 + jsonx.StringLen(m.Role) + jsonx.StringLen(m.Content) + jsonx.StringLen(m.ToolCallID) + jsonx.StringLen(m.Name)
		for _, c := range m.ToolCalls {
			n += 64 + jsonx.StringLen(c.ID) + jsonx.StringLen(c.Name) + jsonx.StringLen(c.Arguments) + len("{}")
		}
	}
	for _, tl := range t.Tools {
		n += 64 + jsonx.StringLen(tl.Name) + jsonx.StringLen(tl.Description) + jsonx.StringLen(string(tl.Parameters)) + len(emptySchema)
	}
	return int64(n)
}

// quickBound is a cheaper bound than turnBound, from lengths alone: every
// byte of text at its most expensive (6 bytes escaped) and generous room
// for each item's keys.
func quickBound(t *chat.Turn) int64 {
	text := int64(len(t.Model) + len(t.ToolChoice.Name))
	items := int64(1)
	for i := range t.Messages {
		m := &t.Messages[i]
		text += int64(len(m.Role) + len(m.Content) + len(m.ToolCallID) + len(m.Name))
		items++
		for _, c := range m.ToolCalls {
			text += int64(len(c.ID) + len(c.Name) + len(c.Arguments))
			items++
		}
	}
	for _, tl := range t.Tools {
		text += int64(len(tl.Name) + len(tl.Description) + len(tl.Parameters))
		items++
	}
	return requestOverhead + 6*text + 128*items
}
