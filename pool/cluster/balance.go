package cluster

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// Balancing: how the replicas split the accounts. Each replica ticks every
// TTL/5, reads the lease table and the live replicas, and decides alone; the
// phase between two replicas' ticks is whatever their starts made it and
// stays so. The rule converges whatever that phase is because a free account
// goes first to a replica that lacks one, and a replica that lacks none never
// takes one a short replica needs:
//
//   - Shares: with n accounts and r live replicas, each should hold at least
//     the floor, n/r rounded down, and at most the ceiling, rounded up (both
//     capped by the replica's own MaxAccounts, which it advertises).
//   - Take: a replica takes free accounts up to its floor; beyond it, up to
//     its ceiling, only the free accounts the short replicas (those below
//     their floor) do not need: free minus what they lack in all.
//   - Give: above the ceiling a replica hands the surplus over. While a live
//     replica is short and no account is free, the replicas above the floor
//     give, most loaded first, ties by id, one per missing account, each one
//     hand-over at a time.
//
// A giver stays at or above the floor, so once it releases the account, the
// account is free while the replica it was given for is still short: no
// replica but a short one takes it, whoever ticks first. Each hand-over thus
// ends on a short replica at that replica's next tick, and lowers what the
// short replicas lack; a membership change starts at most that many
// hand-overs (docs/cluster.md has the longer argument).

// plan is one tick's balancing decision, from the lease table and the live
// replicas read just before; c.mu held while it is made.
type plan struct {
	ceil, floor int      // this replica's share
	held        int      // accounts this replica holds, releasing or not
	releasing   int      // of which this many are being handed over
	free        []string // accounts no replica holds
	mine        int      // accounts this replica lacks to reach its floor
	others      int      // accounts the other live replicas lack to reach theirs
	receiver    string   // the short replica that holds least ("" when none)
	giver       bool     // this replica should hand one account to a short one
}

// take is how many free accounts this replica takes now: what it lacks to
// reach its floor, plus what no short replica needs, never past its ceiling.
func (p plan) take() int {
	extra := max(len(p.free)-p.mine-p.others, 0)
	return max(min(len(p.free), p.mine+extra, p.ceil-p.held), 0)
}

// surplus is how many more accounts to hand over for being above the ceiling.
func (p plan) surplus() int { return p.held - p.releasing - p.ceil }

// load is one live replica's holding in the lease table.
type load struct {
	id   string
	held int
}

// planLocked reads the last refresh into a plan; c.mu held.
func (c *Cluster) planLocked() plan {
	live := max(len(c.replicas), 1)
	if _, ok := c.replicas[c.cfg.ID]; !ok {
		live++ // our heartbeat did not land yet
	}
	names := c.workers.Names()
	n := len(names)
	ceil, floor := (n+live-1)/live, n/live
	p := plan{ceil: ceil, floor: floor, held: len(c.held), releasing: len(c.releasing)}
	if m := c.cfg.MaxAccounts; m > 0 {
		p.ceil, p.floor = min(ceil, m), min(floor, m)
	}
	p.mine = max(p.floor-p.held, 0)
	// Holdings come from the lease table, read fresh before every balance:
	// heartbeats lag one tick behind acquisitions, and trusting them would
	// move accounts (and cut their sessions) for nothing.
	held := map[string]int{}
	for _, name := range names {
		l := c.leases[name]
		switch _, mine := c.held[name]; {
		case l.Holder != "":
			held[l.Holder]++
		case !mine && !c.releasing[name]:
			p.free = append(p.free, name)
		}
	}
	held[c.cfg.ID] = p.held
	loads := make([]load, 0, len(c.replicas))
	least := -1
	for id, r := range c.replicas {
		loads = append(loads, load{id, held[id]})
		want := floor
		if r.MaxAccounts > 0 {
			want = min(want, r.MaxAccounts)
		}
		if id == c.cfg.ID || held[id] >= want {
			continue
		}
		p.others += want - held[id]
		if least < 0 || held[id] < least || (held[id] == least && id < p.receiver) {
			p.receiver, least = id, held[id]
		}
	}
	p.giver = c.giverLocked(loads, floor, p.mine+p.others)
	return p
}

// giverLocked reports whether this replica is among those that should give
// an account to fill the missing ones: the replicas above the floor, the
// most loaded first, ties by id, one account each; c.mu held.
func (c *Cluster) giverLocked(loads []load, floor, missing int) bool {
	slices.SortFunc(loads, func(a, b load) int {
		return cmp.Or(cmp.Compare(b.held, a.held), cmp.Compare(a.id, b.id))
	})
	for _, l := range loads {
		if missing == 0 || l.held <= floor {
			return false
		}
		if l.id == c.cfg.ID {
			return true
		}
		missing--
	}
	return false
}

// balance takes what the plan allows, or hands accounts over: the surplus
// above the ceiling, or one for a short replica when no account is free
// (a free one will reach it without a hand-over).
func (c *Cluster) balance(ctx context.Context, wg *sync.WaitGroup) {
	c.mu.Lock()
	p := c.planLocked()
	c.settled = p.held <= p.ceil && !p.giver
	c.mu.Unlock()
	switch n := p.take(); {
	case n > 0:
		// After Redis lost its data the store admits no new owner for one
		// TTL, while holders win their leases back by renewing.
		for _, name := range p.free[:n] {
			c.acquire(ctx, name)
		}
	case p.surplus() > 0:
		c.releaseSurplus(p.surplus(), p.receiver, wg)
	case p.giver && len(p.free) == 0 && p.releasing == 0:
		c.releaseSurplus(1, p.receiver, wg)
	}
}

// handOverCost orders the accounts to give: a ready one moves with its
// bundle and costs a drain; one that needs a login may have a login under
// way, which the move would cut.
func handOverCost(in route.InstanceStatus) int {
	switch in.State {
	case supervisor.StateReady:
		return 0
	case supervisor.StateNeedsLogin:
		return 2
	default:
		return 1
	}
}

// releaseSurplus hands n accounts over gracefully, the cheapest first:
// drain (no new turns, the running ones finish), then release the lease.
// receiver is the replica they are meant for, when one is short.
func (c *Cluster) releaseSurplus(n int, receiver string, wg *sync.WaitGroup) {
	snap := c.adm.Snapshot()
	slices.SortStableFunc(snap.Instances, func(a, b route.InstanceStatus) int {
		return cmp.Or(cmp.Compare(handOverCost(a), handOverCost(b)), cmp.Compare(a.InFlight, b.InFlight))
	})
	for _, in := range snap.Instances {
		if n == 0 {
			return
		}
		c.mu.Lock()
		h, mine := c.held[in.Name]
		if !mine || c.releasing[in.Name] {
			c.mu.Unlock()
			continue
		}
		c.releasing[in.Name] = true
		c.mu.Unlock()
		n--
		name, token := in.Name, h.token
		wg.Go(func() { c.handOver(name, token, receiver) })
	}
}

// handOver drains the account's worker, stops it, and releases the lease.
// Each hand-over is counted and logged once, so churn shows.
func (c *Cluster) handOver(name string, token int64, receiver string) {
	attrs := []any{"account", name, "giver", c.cfg.ID, "token", token}
	if receiver != "" {
		attrs = append(attrs, "receiver", receiver)
	}
	c.log.Info("handing account over", attrs...)
	if m := c.m; m != nil {
		m.Handovers.WithLabelValues(name).Inc()
	}
	start := time.Now()
	_ = c.workers.Drain(name)
	if !c.workers.WaitStopped(name, start.Add(c.cfg.DrainTimeout)) {
		// Turns outlived the drain: cut them, and wait a little for the
		// worker to go before another replica may start one.
		_ = c.workers.Stop(name)
		c.workers.WaitStopped(name, time.Now().Add(c.interval()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.interval())
	defer cancel()
	c.mu.Lock()
	// No new turn here once the lease can pass on; under c.mu, so that a
	// renewal under way cannot move the fence back (hold.go).
	c.adm.Fence(name, start)
	delete(c.held, name)
	delete(c.releasing, name)
	c.mu.Unlock()
	if err := c.store.ReleaseLease(ctx, name, c.cfg.ID, token); err != nil {
		c.log.Warn("release lease", "account", name, "err", err)
		return
	}
	c.log.Debug("lease released", "account", name, "token", token, "after", time.Since(start))
}
