package session

import (
	"context"
	"sync"
	"time"

	"github.com/poolgate/poolgate/pool/route"
)

// maxPending bounds the deletes queued while Redis is away; beyond it they
// are dropped and the entries expire by their TTL instead.
const maxPending = 4096

// pending holds the deletes that could not reach Redis, replayed by Run once
// it is back: affinity keys taken from the local tier and response ids
// deleted.
type pending struct {
	mu   sync.Mutex
	aff  map[string]struct{}
	resp map[string]struct{}
}

func (p *pending) queueAffinity(key string) { p.queue(&p.aff, key) }

func (p *pending) queueResponse(id string) { p.queue(&p.resp, id) }

func (p *pending) queue(set *map[string]struct{}, s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if *set == nil {
		*set = make(map[string]struct{})
	}
	if len(*set) < maxPending {
		(*set)[s] = struct{}{}
	}
}

// take empties the queues and returns their contents.
func (p *pending) take() (aff, resp []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.aff {
		aff = append(aff, k)
	}
	for k := range p.resp {
		resp = append(resp, k)
	}
	p.aff, p.resp = nil, nil
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
			if r.conn.Allow() {
				_ = r.Ping(ctx) // Ping records the outcome
			}
			if r.Healthy() {
				r.replay(ctx)
				if r.conn.TakeRecovered() && r.cfg.OnRecover != nil {
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
	aff, resp := r.pending.take()
	if len(aff) > 0 {
		if _, err := r.removeRemote(ctx, "all", aff); err != nil {
			r.conn.MarkDown(err)
			return
		}
	}
	if len(resp) > 0 {
		if _, err := r.deleteRemote(ctx, resp...); err != nil {
			r.conn.MarkDown(err)
		}
	}
}

// sweepRemote removes the affinity entries that expired in Redis and reports
// them to OnEvict. Several replicas may sweep at once; the script hands each
// entry to exactly one of them.
func (r *Redis) sweepRemote(ctx context.Context) {
	due, err := r.indexMembers(ctx, true)
	if err == nil {
		var removed []route.Affinity
		removed, err = r.removeRemote(ctx, "due", due)
		for _, a := range removed {
			r.report(a)
		}
	}
	if err != nil && ctx.Err() == nil {
		r.conn.MarkDown(err)
	}
}
