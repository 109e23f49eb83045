// Package chattest has the scripted fakes of chat.Answer, the one answer
// interface, for the tests of everything that reads answers (the router,
// the relay, the protocols) and of the fakes built on them
// (supervisortest's workers): the path the unit tests run is the path
// production runs.
package chattest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
)

// Script is a scripted chat.Answer: it returns its events in order, and
// ends after the first EventDone or EventError among them. Its script may
// pause between events, and may leave the answer open once the events are
// spent, as a worker that goes quiet does; the answer then ends with an
// EventError when its context ends.
type Script struct {
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

var _ chat.Answer = (*Script)(nil)

// NewScript returns an answer of events that ends with ctx, if not before.
func NewScript(ctx context.Context, events ...chat.Event) *Script {
	return &Script{ctx: ctx, events: events, closed: make(chan struct{})}
}

// Text returns an answer that says the pieces and ends cleanly, with usage
// (10 input tokens, one output token per piece).
func Text(ctx context.Context, pieces ...string) *Script {
	return NewScript(ctx, TextEvents(pieces...)...)
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
func (a *Script) Next() (chat.Event, bool) {
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
func (a *Script) cut() (chat.Event, bool) {
	a.ended = true
	return chat.Event{Type: chat.EventError, Err: a.ctx.Err()}, true
}

// Buffered says whether the next event needs no wait.
func (a *Script) Buffered() bool {
	return !a.ended && a.sent < len(a.events) && (a.sent == 0 || a.Pause <= 0)
}

// Close records that the reader is done.
func (a *Script) Close() { a.once.Do(func() { close(a.closed) }) }

// Closed is closed once Close was called.
func (a *Script) Closed() <-chan struct{} { return a.closed }

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

// Feed is a chat.Answer whose events the test hands over as it goes, the
// way a worker's connection delivers them: Next waits for the next one.
// The answer ends after a closing event, with an EventError when its
// context ends first, and as a worker that went away after End.
type Feed struct {
	ctx    context.Context
	ch     chan chat.Event
	ended  bool
	closed chan struct{}
	once   sync.Once
}

var _ chat.Answer = (*Feed)(nil)

// NewFeed returns a feed that holds up to size events not yet read.
func NewFeed(ctx context.Context, size int) *Feed {
	return &Feed{ctx: ctx, ch: make(chan chat.Event, size), closed: make(chan struct{})}
}

// Send hands ev over, waiting while size events wait to be read; false
// when the context ended first.
func (f *Feed) Send(ev chat.Event) bool {
	select {
	case f.ch <- ev:
		return true
	case <-f.ctx.Done():
		return false
	}
}

// End says no more events come.
func (f *Feed) End() { close(f.ch) }

// Next waits for the next event.
func (f *Feed) Next() (chat.Event, bool) {
	if f.ended {
		return chat.Event{}, false
	}
	select {
	case ev, ok := <-f.ch:
		if !ok {
			f.ended = true
			return chat.Event{Type: chat.EventError, Err: chat.ErrWorkerGone}, true
		}
		f.ended = ev.Type == chat.EventDone || ev.Type == chat.EventError
		return ev, true
	case <-f.ctx.Done():
		f.ended = true
		return chat.Event{Type: chat.EventError, Err: f.ctx.Err()}, true
	}
}

// Buffered says whether an event waits to be read.
func (f *Feed) Buffered() bool { return !f.ended && len(f.ch) > 0 }

// Close records that the reader is done.
func (f *Feed) Close() { f.once.Do(func() { close(f.closed) }) }

// Closed is closed once Close was called.
func (f *Feed) Closed() <-chan struct{} { return f.closed }

// Source is a scripted fake of the pool as the edge opens answers on it,
// for the tests of the relay and the protocols (relaytest.Source). Each
// Open records its request and answers with Holder (when it may hop), Err
// (before any event), or a Script of Events (or of what Script says for
// the request).
type Source struct {
	// Err, when set, is returned before any event.
	Err error
	// Events are the answer's; the fake adds no closing event, so a script
	// decides how its answer ends.
	Events []chat.Event
	// Script, when set, overrides Err and Events per request.
	Script func(req *chat.Request) ([]chat.Event, error)
	// Delay holds Open before it answers, as the router holds a request
	// that waits in the queue or whose answer has not started.
	Delay time.Duration
	// Pause and Hang are the answers' (see Script's Pause and Open).
	Pause time.Duration
	Hang  bool
	// Holder, when set, is the replica an Open that may hop names.
	Holder string
	// HopErr is what Hop returns (nil: the hop wrote the response), after
	// HopTime (as long as copying another replica's answer takes).
	HopErr  error
	HopTime time.Duration

	mu      sync.Mutex
	reqs    []*chat.Request
	answers []*Script
	hops    []string
}

// Open records req and answers as scripted.
func (p *Source) Open(ctx context.Context, req *chat.Request, mayHop bool) (chat.Answer, string, error) {
	p.mu.Lock()
	p.reqs = append(p.reqs, req)
	p.mu.Unlock()
	if p.Delay > 0 {
		t := time.NewTimer(p.Delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, "", ctx.Err()
		}
	}
	if mayHop && p.Holder != "" {
		return nil, p.Holder, nil
	}
	events, err := p.Events, p.Err
	if p.Script != nil {
		events, err = p.Script(req)
	}
	if err != nil {
		return nil, "", err
	}
	a := NewScript(ctx, events...)
	a.Pause, a.Open = p.Pause, p.Hang
	p.mu.Lock()
	p.answers = append(p.answers, a)
	p.mu.Unlock()
	return a, "", nil
}

// Hop records the holder and returns HopErr.
func (p *Source) Hop(_ context.Context, holder string) error {
	p.mu.Lock()
	p.hops = append(p.hops, holder)
	p.mu.Unlock()
	time.Sleep(p.HopTime)
	return p.HopErr
}

// Instance names no instance: the fake has none.
func (p *Source) Instance() string { return "" }

// Requests returns the requests seen so far.
func (p *Source) Requests() []*chat.Request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*chat.Request(nil), p.reqs...)
}

// Answers returns the answers handed out so far.
func (p *Source) Answers() []*Script {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*Script(nil), p.answers...)
}

// Hops returns the holders Hop was asked to carry requests to.
func (p *Source) Hops() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.hops...)
}

// Whole is an answer read to its end, as a driver's test looks at it.
type Whole struct {
	Text string
	// Deltas is how many text events made Text.
	Deltas int
	Calls  []chat.ToolCall
	// Done is the closing EventDone, Err the closing EventError's error;
	// exactly one is set.
	Done *chat.Event
	Err  error
}

// Read reads a to its end and closes it, failing t unless it ends within
// d with exactly one closing event, after which Next returns false. It
// reads on a goroutine of its own, so an answer that never ends fails the
// test instead of hanging it.
func Read(t testing.TB, a chat.Answer, d time.Duration) Whole {
	t.Helper()
	got := make(chan []chat.Event, 1)
	go func() { got <- Collect(a) }()
	var evs []chat.Event
	select {
	case evs = <-got:
	case <-time.After(d):
		t.Fatalf("the answer did not end within %s", d)
	}
	var w Whole
	var text strings.Builder
	for _, ev := range evs {
		if w.Done != nil || w.Err != nil {
			t.Fatalf("event %+v after the end of the answer", ev)
		}
		switch ev.Type {
		case chat.EventText:
			text.WriteString(ev.Text)
			w.Deltas++
		case chat.EventToolCall:
			w.Calls = append(w.Calls, ev.ToolCall)
		case chat.EventDone:
			w.Done = &ev
		case chat.EventError:
			w.Err = ev.Err
		}
	}
	if w.Done == nil && w.Err == nil {
		t.Fatalf("the answer ended without EventDone or EventError")
	}
	w.Text = text.String()
	return w
}
