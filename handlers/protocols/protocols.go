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
	// PythonCompat answers in the Python gateway's shapes where its
	// clients read them (off by default).
	PythonCompat bool
}

// Table returns the protocols, in the order the edge asks them to claim a
// request: Gemini's clients are told apart before Anthropic's, and OpenAI's
// chat completions, last, claims whatever no other did (a new protocol's
// line goes before it).
func Table(c Config, log *slog.Logger) []relay.Protocol {
	return []relay.Protocol{
		gemini.New(gemini.Config{Options: c.Options}, log),
		anthropic.New(anthropic.Config{Options: c.Options, Count: c.Count, PythonCompat: c.PythonCompat}, log),
		responses.New(responses.Config{Options: c.Options, PythonCompat: c.PythonCompat}, c.Responses, log),
		openaichat.New(openaichat.Config{Options: c.Options, PythonCompat: c.PythonCompat}, log),
	}
}
