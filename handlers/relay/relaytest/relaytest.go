// Package relaytest has fakes of the router whose timing matters, for the
// tests of the relay and of the protocols on it: an answer that goes quiet
// half-way, and one that never ends until its request does. (Fakes without
// timing are pool/pooltest's.)
package relaytest

import (
	"context"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
)

// Pausing answers "a", stays quiet for Pause, then ends the answer (finish
// stop, no usage). A request that ends first ends it.
type Pausing struct{ Pause time.Duration }

// Chat starts the answer.
func (p Pausing) Chat(ctx context.Context, _ *chat.Request) (<-chan chat.Event, error) {
	ch := make(chan chat.Event)
	go func() {
		defer close(ch)
		for i, ev := range []chat.Event{{Type: chat.EventText, Text: "a"}, {Type: chat.EventDone, Finish: chat.FinishStop}} {
			if i > 0 {
				select {
				case <-time.After(p.Pause):
				case <-ctx.Done():
					return
				}
			}
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

// Blocking answers "partial" and then waits for the request to end, as a
// worker does that is cut off; Ended is closed once it saw the end.
type Blocking struct{ ended chan struct{} }

// NewBlocking returns a Blocking fake for one request.
func NewBlocking() *Blocking { return &Blocking{ended: make(chan struct{})} }

// Ended is closed when the request's context has ended.
func (b *Blocking) Ended() <-chan struct{} { return b.ended }

// Chat starts the answer.
func (b *Blocking) Chat(ctx context.Context, _ *chat.Request) (<-chan chat.Event, error) {
	ch := make(chan chat.Event)
	go func() {
		defer close(ch)
		select {
		case ch <- chat.Event{Type: chat.EventText, Text: "partial"}:
		case <-ctx.Done():
		}
		<-ctx.Done()
		close(b.ended)
	}()
	return ch, nil
}
