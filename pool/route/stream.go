package route

import (
	"context"

	"github.com/poolgate/poolgate/internal/chat"
)

// turnStream is a started answer as the router hands it on (Router.Open): a
// chat.Answer whose every Next reads from the worker only when no event
// waits, with stop sequences, the token cap and the affinity write-back
// applied on the way. It is read on the caller's goroutine and is not safe
// for concurrent use.
type turnStream struct {
	f forwarding
	q chat.Queue // handled, not yet taken
	// qbuf is q's first storage: a whole non-streaming answer (its text
	// and its closing event) fits.
	qbuf   [2]chat.Event
	src    chat.Answer
	cancel context.CancelFunc
	// over is set once the answer ended (its closing event is queued) or
	// its caller went away; the turn is then released.
	over bool
}

var _ chat.Answer = (*turnStream)(nil)

// Next returns the answer's next event; false once the answer is over,
// after its closing event (EventDone or EventError). When the request's
// context ends first, the answer ends with an EventError carrying the
// context's error.
func (s *turnStream) Next() (chat.Event, bool) { return s.q.Next(&s.over, s.step) }

// step reads and handles the worker's next event.
func (s *turnStream) step() {
	ev, ok := s.src.Next()
	switch {
	case fenced(s.f.ctx, nil) != nil:
		// The lease the turn ran under ended: the caller is told.
		s.f.handle(chat.Event{Type: chat.EventError, Err: errFenced})
		s.end()
	case s.f.ctx.Err() != nil:
		// The caller went away: what the worker said last is moot.
		s.f.cancelled()
		s.q.Push(chat.Event{Type: chat.EventError, Err: s.f.ctx.Err()})
		s.end()
	case !ok:
		// An answer that ended without its closing event lost its worker.
		s.f.handle(chat.Event{Type: chat.EventError, Err: chat.ErrWorkerGone})
		s.end()
	case s.f.handle(ev):
		if s.f.put.key != "" {
			// A clean finish: the turn ends, its slot freed, when the
			// caller closes the answer, once the affinity entry is written
			// back (writeBack), so that nothing that waits for the slot
			// (a drain, a handover) runs before the entry is in place.
			s.over = true
			return
		}
		s.end()
	}
}

// Buffered says whether Next has an event without waiting for the worker:
// events the worker already sent are handled to find out.
func (s *turnStream) Buffered() bool {
	for s.q.Len() == 0 && !s.over && s.src.Buffered() {
		s.step()
	}
	return s.q.Len() > 0
}

// Close ends the turn, unfinished or not, and frees its slot; events not
// taken yet are dropped. The affinity entry of a clean finish is written
// back first (writeBack): a stream's caller closes the answer after it sent
// its last event. Safe to call more than once.
func (s *turnStream) Close() {
	s.f.writeBack()
	s.end()
	s.q = chat.Queue{}
}

// Served says how the request was served; once the answer is over, with
// its usage.
func (s *turnStream) Served() Served { return s.f.rq.served }

// end releases the turn once.
func (s *turnStream) end() {
	if s.src == nil {
		return
	}
	s.over = true
	s.src.Close()
	s.f.slot.release()
	s.cancel()
	s.src = nil
}
