// Package pooltest has hand-written fakes of the router for the tests of
// the packages above pool (the protocol handlers): a scripted Chat. Fakes
// of the workers under the pool are in pool/supervisor/supervisortest.
package pooltest

import (
	"context"
	"sync"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
)

// Chatter is a scripted fake of the router's Chat method. Each call records
// its request and answers with Err (before any event) or replays Events.
type Chatter struct {
	// Err, when set, is returned before any event.
	Err error
	// Events are replayed in order; the fake does not add a closing event, so
	// a script decides how its stream ends.
	Events []chat.Event
	// Script, when set, overrides Err and Events per request.
	Script func(req *chat.Request) ([]chat.Event, error)
	// Delay holds Chat before it answers, as the router holds a request
	// that waits in the queue or whose answer has not started.
	Delay time.Duration

	mu   sync.Mutex
	reqs []*chat.Request
}

// Chat records req and replays the script.
func (c *Chatter) Chat(ctx context.Context, req *chat.Request) (<-chan chat.Event, error) {
	c.mu.Lock()
	c.reqs = append(c.reqs, req)
	c.mu.Unlock()
	if c.Delay > 0 {
		select {
		case <-time.After(c.Delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	events, err := c.Events, c.Err
	if c.Script != nil {
		events, err = c.Script(req)
	}
	if err != nil {
		return nil, err
	}
	ch := make(chan chat.Event)
	go func() {
		defer close(ch)
		for _, ev := range events {
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

// Requests returns the requests seen so far.
func (c *Chatter) Requests() []*chat.Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*chat.Request(nil), c.reqs...)
}

// TextAnswer returns a script that streams text in the given pieces and ends
// cleanly with usage.
func TextAnswer(pieces ...string) []chat.Event {
	evs := make([]chat.Event, 0, len(pieces)+1)
	for _, p := range pieces {
		evs = append(evs, chat.Event{Type: chat.EventText, Text: p})
	}
	return append(evs, chat.Event{Type: chat.EventDone, Finish: chat.FinishStop,
		Usage: chat.Usage{InputTokens: 10, OutputTokens: len(pieces)}})
}
