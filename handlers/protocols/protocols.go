// Package protocols is the protocols table: every answer API poolgate
// serves, one line each. It is the one place that names the protocols, as
// pool/drivers is for the kinds of worker: the daemon reads it and hands
// it to the edge (handlers.New), which names none. Adding a protocol is its
// own package under handlers/ plus one line here.
package protocols

import (
	"log/slog"

	"github.com/poolgate/poolgate/handlers/anthropic"
	"github.com/poolgate/poolgate/handlers/gemini"
	"github.com/poolgate/poolgate/handlers/openaichat"
	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/handlers/responses"
)

// Config is what the protocols take from the daemon.
type Config struct {
	relay.Options
	// Responses keeps the Responses API's stored responses.
	Responses responses.Store
	// Count counts a text's tokens, for the prompt tokens Anthropic's
	// streams announce at their start (nil: 0 there).
	Count func(string) int
	// Compat is another gateway's ways, kept for its clients
	// (internal/pycompat's, the Python gateway's; nil: none).
	Compat Compat
}

// Compat is what the protocols take of another gateway's ways: its
// statuses (relay.Options.Status), its completions' extra fields
// (openaichat.Config.Extra), its Responses API's forms and endings
// (responses.Shapes).
type Compat interface {
	responses.Shapes
	Status(code string, status int) int
	Completion(body []byte, instance string, firstMS, totalMS int64) []byte
	// On says the ways are on; off, only its Responses shapes are asked
	// (their refusals name how to turn it on), and no request pays for
	// the rest.
	On() bool
}

// Table returns the protocols, in the order the edge asks them to claim a
// request: Gemini's clients are told apart before Anthropic's, and OpenAI's
// chat completions, last, claims whatever no other did (a new protocol's
// line goes before it). The gateway whose ways Compat keeps had no Gemini
// API.
func Table(c Config, log *slog.Logger) []relay.Protocol {
	o, chat, rsp := c.Options, openaichat.Config{Options: c.Options}, responses.Config{Options: c.Options}
	if c.Compat != nil {
		rsp.Shapes = c.Compat
	}
	if c.Compat != nil && c.Compat.On() {
		o.Status = c.Compat.Status
		chat.Options, chat.Extra, rsp.Options = o, c.Compat.Completion, o
	}
	return []relay.Protocol{
		gemini.New(gemini.Config{Options: c.Options}, log),
		anthropic.New(anthropic.Config{Options: o, Count: c.Count}, log),
		responses.New(rsp, c.Responses, log),
		openaichat.New(chat, log),
	}
}
