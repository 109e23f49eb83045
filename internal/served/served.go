// Package served is the record of how one request was served, filled as it
// goes by whoever knows a part: the router names the instance, account and
// model and whether the upstream session was continued, then the usage; the
// relay notes the error told to the caller. The HTTP layer reads it when
// the response headers go out (which instance answered) and once the
// request is over (usage, the request log, per-key metrics). It knows
// nothing of routes, workers or storage.
package served

import (
	"context"
	"sync"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
)

// Info is what a Record holds.
type Info struct {
	Instance string
	Account  string
	Model    string
	// Reused says the turn continued an upstream session.
	Reused bool
	Usage  chat.Usage
	// Error is the message told to the caller, "" when none.
	Error string
	// Forwarded says another replica served the request.
	Forwarded bool
	// TTFT is the time from the request to its answer's first event, 0
	// before one.
	TTFT time.Duration
	// Prompt and Answer are the newest prompt message and the answer's
	// text, kept only when the Record captures them (a debug switch).
	Prompt, Answer string
}

// Record collects one request's Info. Its methods are safe for concurrent
// use and do nothing on a nil Record.
type Record struct {
	mu      sync.Mutex
	info    Info
	capture bool
}

type ctxKey struct{}

// With returns ctx carrying a fresh Record.
func With(ctx context.Context) (context.Context, *Record) {
	r := &Record{}
	return context.WithValue(ctx, ctxKey{}, r), r
}

// From returns ctx's Record, nil when it carries none.
func From(ctx context.Context) *Record {
	r, _ := ctx.Value(ctxKey{}).(*Record)
	return r
}

// Capture asks for the prompt and the answer to be kept.
func (r *Record) Capture() {
	r.mu.Lock()
	r.capture = true
	r.mu.Unlock()
}

// Capturing reports whether the Record keeps the prompt and the answer.
func (r *Record) Capturing() bool {
	if r == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.capture
}

// Text notes the prompt and the answer when the Record captures them.
func (r *Record) Text(prompt, answer string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	if r.capture {
		r.info.Prompt, r.info.Answer = prompt, answer
	}
	r.mu.Unlock()
}

// Turn notes the worker a turn runs on (again on each retry).
func (r *Record) Turn(instance, account, model string, reused bool) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.info.Instance, r.info.Account, r.info.Model, r.info.Reused = instance, account, model, reused
	r.mu.Unlock()
}

// First notes the time to the answer's first event.
func (r *Record) First(d time.Duration) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.info.TTFT = d
	r.mu.Unlock()
}

// Done notes a finished turn's usage.
func (r *Record) Done(u chat.Usage) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.info.Usage = u
	r.mu.Unlock()
}

// Fail notes the error told to the caller (the first one stays).
func (r *Record) Fail(message string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	if r.info.Error == "" {
		r.info.Error = message
	}
	r.mu.Unlock()
}

// Forward notes that another replica served the request.
func (r *Record) Forward() {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.info.Forwarded = true
	r.mu.Unlock()
}

// Instance is the instance the turn runs on, "" before a worker took it.
func (r *Record) Instance() string {
	if r == nil {
		return ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.info.Instance
}

// Info returns a copy of what the Record holds.
func (r *Record) Info() Info {
	if r == nil {
		return Info{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.info
}
