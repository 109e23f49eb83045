package chat

// Answer is one turn's answer, read event by event on the reader's own
// goroutine: every driver's turn, the router's forwarded answer and the
// tests' scripted fakes are Answers, and the router and the relay read them
// the same way. No goroutine or channel stands between the worker's
// connection and the client.
//
// An Answer is not safe for concurrent use.
type Answer interface {
	// Next returns the answer's next event, waiting for the worker when
	// none is at hand. An answer ends with exactly one EventDone or
	// EventError (when the turn's context ends first, an EventError
	// carrying its error); after it, Next returns false.
	Next() (Event, bool)
	// Buffered reports whether Next has an event without waiting for the
	// worker (a stream's writer holds an event back while another is at
	// hand, to write them together). It never waits.
	Buffered() bool
	// Close ends the turn, aborting it on the worker when its answer is not
	// over. The reader calls it once done; a second call does nothing.
	Close()
}

// Queue holds the events an Answer has made and not yet returned: its Next
// pops one, and reads more from the worker when none waits. The zero value
// is an empty queue.
type Queue struct {
	q []Event
	i int
}

// QueueIn returns an empty queue that fills buf's storage before it
// allocates its own: an array in the owner's struct spares a short answer
// any allocation for its queue.
func QueueIn(buf []Event) Queue { return Queue{q: buf[:0]} }

// Len is the number of queued events.
func (e *Queue) Len() int { return len(e.q) - e.i }

// Push queues ev, reusing the storage of events already taken.
func (e *Queue) Push(ev Event) {
	if e.i > 0 && e.i == len(e.q) {
		e.q, e.i = e.q[:0], 0
	}
	e.q = append(e.q, ev)
}

// Pop returns the next queued event, or false when none waits; the queue's
// storage is then reused by the next Push.
func (e *Queue) Pop() (Event, bool) {
	if e.i >= len(e.q) {
		e.q, e.i = e.q[:0], 0
		return Event{}, false
	}
	ev := e.q[e.i]
	e.q[e.i] = Event{}
	e.i++
	return ev, true
}

// Next is an Answer's Next over the queue: the next queued event, with step
// called to read more from the worker while none waits and the answer has
// not ended (step sets *ended once it queued the closing event); false once
// the queue is empty and the answer ended.
func (e *Queue) Next(ended *bool, step func()) (Event, bool) {
	for {
		if ev, ok := e.Pop(); ok {
			return ev, true
		}
		if *ended {
			return Event{}, false
		}
		step()
	}
}
