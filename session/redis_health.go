package session

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/poolgate/poolgate/pool"
)

// maxPending bounds the deletes queued while Redis is away; beyond it they
// are dropped and the entries expire by their TTL instead.
const maxPending = 4096

// health tracks whether Redis is reachable. After a failure it marks Redis
// down for one retry interval, during which calls skip Redis at no cost; then
// one call probes. Transitions are logged once each, never per request.
type health struct {
	now   func() time.Time
	retry time.Duration
	log   *slog.Logger

	mu      sync.Mutex
	down    bool
	retryAt time.Time
	// recovered is set when Redis answers after being marked down, and
	// cleared by Run when it has called OnRecover.
	recovered bool
	// Deletes that could not reach Redis, replayed by Run once it is back:
	// affinity keys taken from the local tier and response ids deleted.
	pendingAff  map[string]struct{}
	pendingResp map[string]struct{}
}

func (h *health) healthy() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.down
}

// allow reports whether a call should try Redis. While down it lets one
// caller per retry interval through as the probe.
func (h *health) allow() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.down {
		return true
	}
	if now := h.now(); !now.Before(h.retryAt) {
		h.retryAt = now.Add(h.retry)
		return true
	}
	return false
}

func (h *health) failure(err error) {
	h.mu.Lock()
	first := !h.down
	h.down = true
	h.retryAt = h.now().Add(h.retry)
	h.mu.Unlock()
	if first {
		h.log.Warn("redis unavailable; session store degraded to the in-process cache",
			"err", err, "retry_every", h.retry)
	}
}

func (h *health) success() {
	h.mu.Lock()
	was := h.down
	h.down = false
	h.recovered = h.recovered || was
	h.mu.Unlock()
	if was {
		h.log.Info("redis reachable again; session store recovered")
	}
}

func (h *health) queueAffinity(key string) { h.queue(&h.pendingAff, key) }

func (h *health) queueResponse(id string) { h.queue(&h.pendingResp, id) }

func (h *health) queue(set *map[string]struct{}, s string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if *set == nil {
		*set = make(map[string]struct{})
	}
	if len(*set) < maxPending {
		(*set)[s] = struct{}{}
	}
}

// takeRecovered reports whether Redis recovered since the last call.
func (h *health) takeRecovered() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.recovered
	h.recovered = false
	return r
}

// takePending empties the queues and returns their contents.
func (h *health) takePending() (aff, resp []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range h.pendingAff {
		aff = append(aff, k)
	}
	for k := range h.pendingResp {
		resp = append(resp, k)
	}
	h.pendingAff, h.pendingResp = nil, nil
	return aff, resp
}

// Run keeps the store tidy until ctx is done: every RetryInterval it probes
// Redis (so the store notices an outage and recovers without traffic),
// replays deletes queued during an outage and, after one, calls OnRecover; every SweepInterval it reports and
// removes expired affinity entries in Redis and drops expired local ones.
func (r *Redis) Run(ctx context.Context) {
	probe := time.NewTicker(r.cfg.RetryInterval)
	defer probe.Stop()
	sweep := time.NewTicker(r.cfg.SweepInterval)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-probe.C:
			// Probe also while healthy: an outage without traffic is still
			// noticed, and so is the recovery after it.
			if r.health.allow() {
				_ = r.Ping(ctx) // Ping records the outcome
			}
			if r.Healthy() {
				r.replay(ctx)
				if r.health.takeRecovered() && r.cfg.OnRecover != nil {
					r.cfg.OnRecover(ctx)
				}
			}
		case <-sweep.C:
			r.local.sweep()
			if r.Healthy() {
				r.sweepRemote(ctx)
			}
		}
	}
}

// replay sends the deletes queued during an outage; on failure the rest are
// dropped, and the entries expire by their TTL.
func (r *Redis) replay(ctx context.Context) {
	aff, resp := r.health.takePending()
	if len(aff) > 0 {
		if _, err := r.removeRemote(ctx, "all", aff); err != nil {
			r.health.failure(err)
			return
		}
	}
	if len(resp) > 0 {
		if _, err := r.deleteRemote(ctx, resp...); err != nil {
			r.health.failure(err)
		}
	}
}

// sweepRemote removes the affinity entries that expired in Redis and reports
// them to OnEvict. Several replicas may sweep at once; the script hands each
// entry to exactly one of them.
func (r *Redis) sweepRemote(ctx context.Context) {
	due, err := r.indexMembers(ctx, true)
	if err == nil {
		var removed []pool.Affinity
		removed, err = r.removeRemote(ctx, "due", due)
		for _, a := range removed {
			r.report(a)
		}
	}
	if err != nil && ctx.Err() == nil {
		r.health.failure(err)
	}
}
