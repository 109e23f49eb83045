package cluster

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Holding leases. A replica serves an account only until its deadline: the
// start of its last confirmed acquisition or renewal of the lease plus TTL
// minus the margin, on its own monotonic clock (lease.go's self-fencing
// rule). The deadline is kept by two timers of their own, neither behind a
// Redis call: the admission room's fence, which refuses new turns and cuts
// the running ones then (pool/route), and the fence loop here, which stops
// the worker and lets go of the lease. The tick that renews may wait on a
// slow or failing-over Redis for as long as its calls' timeouts allow, on a
// starved machine longer; that only leaves the deadline where it was.
//
// Before the fence loop, the tick's own goroutine stopped the workers
// between Redis calls: a tick stuck on Redis stopped them up to a tick
// late, and with the worker's stop waiting behind a hanging health check,
// turns ran on after the lease had passed to another replica
// (TestClusterNeverServesAnAccountTwice).

// Run coordinates until ctx ends. Leave releases the leases after it (the
// pool must be drained by then).
func (c *Cluster) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { c.fences(ctx) })
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		c.tick(ctx, &wg)
		// One interval after this tick began, or at once when it took
		// longer (Redis was slow).
		t.Reset(max(c.interval()-time.Since(start), 0))
	}
}

func (c *Cluster) tick(ctx context.Context, wg *sync.WaitGroup) {
	// Renewals first, each call bounded by the store's own timeout: they
	// keep what is served now, and a shared budget let slow calls before
	// them starve them.
	c.renew(ctx)
	cctx, cancel := context.WithTimeout(ctx, c.interval())
	defer cancel()
	c.heartbeat(cctx)
	if err := c.refresh(cctx); err != nil {
		c.log.Warn("cluster view", "err", err)
		return
	}
	c.balance(cctx, wg)
}

// fences lets go of every lease the moment its deadline passes, stopping
// its worker, until ctx ends.
func (c *Cluster) fences(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.fenceMoved:
		}
		c.enforceFences()
		if f, ok := c.firstFence(); ok {
			t.Reset(max(time.Until(f), 0))
		}
	}
}

// wakeFences tells the fence loop a deadline was set.
func (c *Cluster) wakeFences() {
	select {
	case c.fenceMoved <- struct{}{}:
	default:
	}
}

// firstFence returns the earliest deadline of a held lease.
func (c *Cluster) firstFence() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first time.Time
	for _, h := range c.held {
		if first.IsZero() || h.valid.Before(first) {
			first = h.valid
		}
	}
	return first, !first.IsZero()
}

// enforceFences stops every worker whose lease this replica can no longer
// be sure of: before the lease can pass to another replica, never after.
func (c *Cluster) enforceFences() {
	now := time.Now()
	c.mu.Lock()
	var lost []string
	for name, h := range c.held {
		if !now.Before(h.valid) {
			lost = append(lost, name)
			delete(c.held, name)
		}
	}
	c.mu.Unlock()
	for _, name := range lost {
		c.log.Warn("lease not renewed in time: stopping the account's worker", "account", name)
		_ = c.workers.Stop(name)
	}
}

// renew renews every lease held whose deadline has not passed (one that
// has is the fence loop's to let go of: renewing it would trust a lease
// that may have passed on).
func (c *Cluster) renew(ctx context.Context) {
	c.mu.Lock()
	held := make(map[string]*heldLease, len(c.held))
	for name, h := range c.held {
		held[name] = h
	}
	c.mu.Unlock()
	for name, h := range held {
		start := time.Now()
		if !c.trusts(name, h, start) {
			continue
		}
		_, err := c.store.RenewLease(ctx, name, c.cfg.ID, h.token, c.cfg.LeaseTTL)
		switch {
		case err == nil:
			c.setValid(name, h, start)
		case errors.Is(err, ErrLeaseLost):
			c.log.Warn("lease lost to another replica: stopping the account's worker", "account", name)
			if c.drop(name, h, time.Now()) {
				_ = c.workers.Stop(name)
			}
		default:
			// Unreachable store: keep serving until the deadline,
			// renewing on the next tick.
			c.log.Warn("renew lease", "account", name, "err", err)
		}
	}
}

// trusts reports whether h is still the account's lease and its deadline
// is after now.
func (c *Cluster) trusts(name string, h *heldLease, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.held[name] == h && now.Before(h.valid)
}

// deadline is how long this replica may trust a lease acquired or renewed
// by a call that started at start.
func (c *Cluster) deadline(start time.Time) time.Time {
	return start.Add(c.cfg.LeaseTTL - c.margin())
}

// setValid moves a held lease's deadline after a renewal that started at
// start, and the admission room's fence with it. A lease let go of
// meanwhile (its deadline passed, it was lost or handed over) stays let go:
// its worker is stopping or stopped.
func (c *Cluster) setValid(name string, h *heldLease, start time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held[name] != h {
		return
	}
	h.valid = c.deadline(start)
	// Under c.mu, as every letting go is: a renewal that raced one cannot
	// move its fence back.
	c.adm.Fence(name, h.valid)
	c.wakeFences()
}

// drop lets go of the lease held as h and fences its instance from at on;
// false when it was let go of already.
func (c *Cluster) drop(name string, h *heldLease, at time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held[name] != h {
		return false
	}
	delete(c.held, name)
	c.adm.Fence(name, at)
	return true
}

func (c *Cluster) acquire(ctx context.Context, name string) {
	start := time.Now()
	l, ok, err := c.store.AcquireLease(ctx, name, c.cfg.ID, c.cfg.LeaseTTL)
	if err == nil && !ok && l.Holder == "" && time.Now().Before(l.Expires) {
		c.mu.Lock()
		c.quarantine = l.Expires
		c.mu.Unlock()
	}
	if err != nil || !ok {
		return
	}
	h := &heldLease{token: l.Token, valid: c.deadline(start)}
	c.mu.Lock()
	c.held[name] = h
	c.adm.Fence(name, h.valid)
	// The worker starts under c.mu: the fence loop cannot let go of the
	// lease between the check and the start, so its stop comes after.
	if !time.Now().Before(h.valid) {
		c.mu.Unlock()
		c.wakeFences() // won too late to serve: the fence loop lets go
		return
	}
	err = c.workers.Restart(name)
	c.mu.Unlock()
	c.wakeFences()
	if err != nil {
		c.unheld(name, h)
		return
	}
	c.log.Info("lease acquired: starting the account's worker", "account", name, "token", l.Token)
}
