package session

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/poolgate/poolgate/pool/route"
)

// maxPending bounds the deletes queued while Redis is away; beyond it they
// are dropped and the entries expire by their TTL instead.
const maxPending = 4096

// pending holds what could not reach Redis, replayed by Run once it is
// back: the deletes (affinity keys taken from the local tier, response ids
// deleted) and the affinity keys put while it was away, whose entries the
// local tier holds until they are written back.
type pending struct {
	mu   sync.Mutex
	aff  map[string]struct{}
	resp map[string]struct{}
	puts map[string]struct{}
	// maxPuts bounds puts: no more entries than the local tier keeps.
	maxPuts int
	onHeld  func(n int) // told len(puts) after each change, in order
}

func (p *pending) queueAffinity(key string) { p.queue(&p.aff, key, maxPending) }

func (p *pending) queueResponse(id string) { p.queue(&p.resp, id, maxPending) }

// queuePut notes a key whose entry lives in the local tier only.
func (p *pending) queuePut(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.puts)
	p.queueLocked(&p.puts, key, p.maxPuts)
	if len(p.puts) != n {
		p.onHeld(len(p.puts))
	}
}

func (p *pending) queue(set *map[string]struct{}, s string, limit int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queueLocked(set, s, limit)
}

func (p *pending) queueLocked(set *map[string]struct{}, s string, limit int) {
	if *set == nil {
		*set = make(map[string]struct{})
	}
	if len(*set) < limit {
		(*set)[s] = struct{}{}
	}
}

// take empties the delete queues and returns their contents.
func (p *pending) take() (aff, resp []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	aff, resp = slices.Collect(maps.Keys(p.aff)), slices.Collect(maps.Keys(p.resp))
	p.aff, p.resp = nil, nil
	return aff, resp
}

// takePuts empties the put queue and returns it. The count it reports is
// made good by the write-back (requeued keys are counted again).
func (p *pending) takePuts() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	keys := slices.Collect(maps.Keys(p.puts))
	p.puts = nil
	if len(keys) > 0 {
		p.onHeld(0)
	}
	return keys
}

// Run keeps the store tidy until ctx is done: every RetryInterval it probes
// Redis (so the store notices an outage and recovers without traffic),
// replays deletes queued during an outage, writes back the affinity put
// meanwhile (at once when a call finds Redis back) and, after an outage,
// calls OnRecover; every SweepInterval it reports and removes expired
// affinity entries in Redis and drops expired local ones.
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
			r.catchUp(ctx)
		case <-r.conn.Back():
			r.catchUp(ctx)
		case <-sweep.C:
			r.local.sweep()
			if r.Healthy() {
				r.sweepRemote(ctx)
			}
		}
	}
}

// catchUp, while Redis answers, sends what waited for it: the deletes, then
// the affinity put meanwhile (a key both taken and put again is deleted,
// then written), and after an outage calls OnRecover.
func (r *Redis) catchUp(ctx context.Context) {
	if !r.Healthy() {
		return
	}
	r.replay(ctx)
	r.writeBack(ctx)
	if r.conn.TakeRecovered() && r.cfg.OnRecover != nil {
		r.cfg.OnRecover(ctx)
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
