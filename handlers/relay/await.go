package relay

import (
	"sync"
	"time"
)

// await runs call (the router's Chat, which returns once the answer has
// started) on this goroutine. While call runs longer than every, tick is
// called each time every passes, from a timer's goroutine: a long wait in
// the queue, or an answer held back until it is clear whether it is a tool
// call, must not look like a dead connection to the client or a proxy. The
// first tick commits the stream (headers and the protocol's opening events),
// so an error after it is an in-stream error. Running call here rather than
// tick spares every stream a goroutine and a hand-off before its first event;
// the ticks are rare.
//
// If tick fails (the client is gone), stop is called to end call's work and
// await returns tick's error once call has returned, with what call
// returned (the caller still owns it). No tick runs after
// await returns. every <= 0 just calls. When call may write the response
// itself (a forwarded request), the two take turns through httpx.Claim: tick
// should write only once Claim(ctx, Local) said yes.
func await[T any](every time.Duration, stop func(), call func() (T, error), tick func() error) (T, error) {
	if every <= 0 {
		return call()
	}
	var (
		mu       sync.Mutex // held by a running tick
		finished bool
		tickErr  error
		t        *time.Timer
	)
	mu.Lock()
	t = time.AfterFunc(every, func() {
		mu.Lock()
		defer mu.Unlock()
		if finished || tickErr != nil {
			return
		}
		if err := tick(); err != nil {
			tickErr = err
			stop() // the answer's producers stop with the request
			return
		}
		t.Reset(every)
	})
	mu.Unlock()
	v, err := call()
	mu.Lock()
	finished = true
	t.Stop()
	terr := tickErr
	mu.Unlock()
	if terr != nil {
		return v, terr
	}
	return v, err
}
