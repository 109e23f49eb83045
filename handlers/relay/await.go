package relay

import "time"

// await runs call (the router's Chat, which returns once the answer has
// started) and waits for it. While call runs longer than every, tick is
// called on this goroutine each time every passes: a long wait in the queue,
// or an answer held back until it is clear whether it is a tool call, must
// not look like a dead connection to the client or a proxy. The first tick
// commits the stream (headers and the protocol's opening events), so an
// error after it is an in-stream error.
//
// If tick fails (the client is gone), stop is called to end call's work and
// await returns tick's error once call has returned. every <= 0 just calls.
// When call may write the response itself (a forwarded request), the two
// take turns through httpx.Claim: tick should write only once Claim(ctx, Local)
// said yes.
func await[T any](every time.Duration, stop func(), call func() (T, error), tick func() error) (T, error) {
	if every <= 0 {
		return call()
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := call()
		done <- result{v, err}
	}()
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case r := <-done:
			return r.v, r.err
		case <-t.C:
			if err := tick(); err != nil {
				stop() // the answer's producers stop with the request
				<-done
				var zero T
				return zero, err
			}
			t.Reset(every)
		}
	}
}
