package supervisor

import "time"

// Cooldowns are what a rate limit does to a worker: out of rotation until
// the upstream's retry-after (or an exponential guess) has passed and a
// health check passed. The operator can end one early.

// Cooldown takes the worker out of rotation for d (0: exponential from 5s,
// doubling with each cooldown since the last good turn, up to 5 minutes)
// and returns how long it is.
func (w *Worker) Cooldown(d time.Duration) time.Duration {
	w.update(func() {
		if d <= 0 {
			d = min(5*time.Second<<min(w.coolCount, 6), 5*time.Minute)
		}
		w.coolCount++
		w.coolUntil = time.Now().Add(d)
	})
	w.Check() // re-arm the loop's cooldown timer
	return d
}

// ClearCooldown puts the worker back in rotation now and starts its
// cooldown backoff over. It reports whether there was a cooldown.
func (w *Worker) ClearCooldown() bool {
	had := false
	w.updateIf(func() bool {
		had = !w.coolUntil.IsZero()
		w.coolUntil, w.coolCount = time.Time{}, 0
		return had
	})
	if had {
		w.log.Info("cooldown cleared by the operator")
	}
	return had
}

// TurnOK notes a successful turn: the cooldown backoff starts over.
func (w *Worker) TurnOK() {
	w.mu.Lock()
	w.coolCount = 0
	w.mu.Unlock()
}

// cooldownLeft returns the time until the cooldown may end, and whether
// the worker is cooling down.
func (w *Worker) cooldownLeft() (time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.coolUntil.IsZero() {
		return 0, false
	}
	return max(time.Until(w.coolUntil), 0), true
}

// endCooldown clears a cooldown whose time is up (after a good probe).
func (w *Worker) endCooldown() {
	ended := false
	w.updateIf(func() bool {
		ended = !w.coolUntil.IsZero() && !time.Now().Before(w.coolUntil)
		if ended {
			w.coolUntil = time.Time{}
		}
		return ended
	})
	if ended {
		w.log.Info("cooldown over, back in rotation")
	}
}
