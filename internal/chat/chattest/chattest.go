// Package chattest has the scripted fakes of chat.Answer, the one answer
// interface, for the tests of everything that reads answers (the router,
// the relay, the protocols) and of the fakes built on them
// (supervisortest's workers): the path the unit tests run is the path
// production runs.
package chattest

import (
	"context"
	"sync"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
)

// Answer is a scripted chat.Answer: it returns its events in order, and
// ends after the first EventDone or EventError among them. Its script may
// pause between events, and may leave the answer open once the events are
// spent, as a worker that goes quiet does; the answer then ends with an
// EventError when its context ends.
type Answer struct {
	ctx    context.Context
	events []chat.Event
	// Pause is waited before each event but the first (the context ending
	// cuts it short, and the answer ends as when it is left open).
	Pause time.Duration
	// Open leaves the answer unfinished once its events are spent: Next
	// waits for the context, then ends with its error.
	Open bool

	sent   int
	ended  bool
	closed chan struct{}
	once   sync.Once
}

var _ chat.Answer = (*Answer)(nil)

// Script returns an answer of events that ends with ctx, if not before.
func Script(ctx context.Context, events ...chat.Event) *Answer {
	return &Answer{ctx: ctx, events: events, closed: make(chan struct{})}
}

// Text returns an answer that says the pieces and ends cleanly, with usage
// (10 input tokens, one output token per piece).
func Text(ctx context.Context, pieces ...string) *Answer {
	return Script(ctx, TextEvents(pieces...)...)
}

// TextEvents are the events of an answer that says the pieces and ends
// cleanly, with usage (10 input tokens, one output token per piece).
func TextEvents(pieces ...string) []chat.Event {
	evs := make([]chat.Event, 0, len(pieces)+1)
	for _, p := range pieces {
		evs = append(evs, chat.Event{Type: chat.EventText, Text: p})
	}
	return append(evs, chat.Event{Type: chat.EventDone, Finish: chat.FinishStop,
		Usage: chat.Usage{InputTokens: 10, OutputTokens: len(pieces)}})
}

// Next returns the next scripted event.
func (a *Answer) Next() (chat.Event, bool) {
	if a.ended {
		return chat.Event{}, false
	}
	if a.sent < len(a.events) && a.sent > 0 && a.Pause > 0 {
		t := time.NewTimer(a.Pause)
		select {
		case <-t.C:
		case <-a.ctx.Done():
			t.Stop()
			return a.cut()
		}
	}
	if a.sent < len(a.events) {
		ev := a.events[a.sent]
		a.sent++
		a.ended = ev.Type == chat.EventDone || ev.Type == chat.EventError
		return ev, true
	}
	if a.Open {
		<-a.ctx.Done()
		return a.cut()
	}
	// A script without a closing event ends as a worker that went away.
	a.ended = true
	return chat.Event{Type: chat.EventError, Err: chat.ErrWorkerGone}, true
}

// cut ends the answer with its context's error.
func (a *Answer) cut() (chat.Event, bool) {
	a.ended = true
	return chat.Event{Type: chat.EventError, Err: a.ctx.Err()}, true
}

// Buffered says whether the next event needs no wait.
func (a *Answer) Buffered() bool {
	return !a.ended && a.sent < len(a.events) && (a.sent == 0 || a.Pause <= 0)
}

// Close records that the reader is done.
func (a *Answer) Close() { a.once.Do(func() { close(a.closed) }) }

// Closed is closed once Close was called.
func (a *Answer) Closed() <-chan struct{} { return a.closed }

// Collect reads a to its end and closes it.
func Collect(a chat.Answer) []chat.Event {
	defer a.Close()
	var evs []chat.Event
	for {
		ev, ok := a.Next()
		if !ok {
			return evs
		}
		evs = append(evs, ev)
	}
}
