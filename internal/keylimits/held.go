package keylimits

import (
	"context"
	"time"

	"github.com/poolgate/poolgate/internal/redisconn"
)

// settle sends a ticket's end or a charge to Redis: the slot freed, the
// tokens charged. What Redis cannot take now is held for Run.
func (r *Redis) settle(base, slot string, tokens int64) {
	if slot == "" && tokens <= 0 {
		return
	}
	var slots []string
	if slot != "" {
		slots = []string{slot}
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	if r.send(ctx, base, tokens, slots) != nil {
		r.hold(base, slot, tokens)
	}
}

// send runs doneScript for one key under the Conn's health.
func (r *Redis) send(ctx context.Context, base string, tokens int64, slots []string) error {
	args := make([]any, 0, len(slots)+1)
	args = append(args, tokens)
	for _, s := range slots {
		args = append(args, s)
	}
	return r.conn.Do(ctx, "key_limits", func(ctx context.Context, c redisconn.Client) error {
		return doneScript.Run(ctx, c, []string{base}, args...).Err()
	})
}

// hold keeps what Redis could not take, merged per key: tokens add up (a
// sum charged late is the same sum), slots to free are listed.
func (r *Redis) hold(base, slot string, tokens int64) {
	r.mu.Lock()
	h := r.held[base]
	if h == nil {
		h = &heldEnd{}
		r.held[base] = h
	}
	h.tokens += max(tokens, 0)
	if slot != "" && len(h.slots) < maxHeldSlots {
		h.slots = append(h.slots, slot)
	}
	h.n++
	r.nheld++
	n := r.nheld
	r.mu.Unlock()
	r.onHeld(n)
}

// Held is how many ticket ends and charges wait for Redis.
func (r *Redis) Held() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nheld
}

// Run sends what is held every retry interval until ctx ends.
func (r *Redis) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.Flush(ctx)
		}
	}
}

// Flush sends what is held, key by key, and stops at the first key Redis
// does not take. A key's held end is sent as one script (its tokens, its
// slots), so a failure leaves it whole; one whose answer was lost may be
// charged twice, which errs towards the limit, never past it.
func (r *Redis) Flush(ctx context.Context) {
	r.mu.Lock()
	bases := make([]string, 0, len(r.held))
	for b := range r.held {
		bases = append(bases, b)
	}
	r.mu.Unlock()
	for _, base := range bases {
		r.mu.Lock()
		h := r.held[base]
		delete(r.held, base)
		r.mu.Unlock()
		if h == nil {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, r.timeout)
		err := r.send(cctx, base, h.tokens, h.slots)
		cancel()
		r.mu.Lock()
		if err != nil {
			// Put it back, merged with what was held meanwhile.
			if now := r.held[base]; now != nil {
				h.tokens += now.tokens
				h.slots = append(h.slots, now.slots...)[:min(len(h.slots)+len(now.slots), maxHeldSlots)]
				h.n += now.n
			}
			r.held[base] = h
		} else {
			r.nheld -= h.n
		}
		n := r.nheld
		r.mu.Unlock()
		r.onHeld(n)
		if err != nil {
			return
		}
	}
}
