// Package pooltest has hand-written fakes of pool's collaborators for the
// tests of packages that sit above pool (the protocol handlers).
package pooltest

import (
	"context"
	"sync"
	"time"

	"github.com/poolgate/poolgate/pool"
)

// Chatter is a scripted fake of the router's Chat method. Each call records
// its request and answers with Err (before any event) or replays Events.
type Chatter struct {
	// Err, when set, is returned before any event.
	Err error
	// Events are replayed in order; the fake does not add a closing event, so
	// a script decides how its stream ends.
	Events []pool.Event
	// Script, when set, overrides Err and Events per request.
	Script func(req *pool.ChatRequest) ([]pool.Event, error)
	// Delay holds Chat before it answers, as the router holds a request
	// that waits in the queue or whose answer has not started.
	Delay time.Duration

	mu   sync.Mutex
	reqs []*pool.ChatRequest
}

// Chat records req and replays the script.
func (c *Chatter) Chat(ctx context.Context, req *pool.ChatRequest) (<-chan pool.Event, error) {
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
	ch := make(chan pool.Event)
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
func (c *Chatter) Requests() []*pool.ChatRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*pool.ChatRequest(nil), c.reqs...)
}

// TextAnswer returns a script that streams text in the given pieces and ends
// cleanly with usage.
func TextAnswer(pieces ...string) []pool.Event {
	evs := make([]pool.Event, 0, len(pieces)+1)
	for _, p := range pieces {
		evs = append(evs, pool.Event{Type: pool.EventText, Text: p})
	}
	return append(evs, pool.Event{Type: pool.EventDone, Finish: pool.FinishStop,
		Usage: pool.Usage{InputTokens: 10, OutputTokens: len(pieces)}})
}
