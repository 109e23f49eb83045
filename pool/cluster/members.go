package cluster

import (
	"context"
	"time"

	"github.com/poolgate/poolgate/pool/supervisor"
)

// Accounts added and removed while the replica runs (a reload). An added
// account enters the lease competition at the next tick like any free one;
// until this replica wins it, its worker stays held and fenced. A removed
// account's worker is drained and stopped by the supervisor first; then its
// lease, if this replica holds it, is released at once so that a replica
// still configured with the account may take it over.

var _ supervisor.Members = (*Cluster)(nil)

// Joined fences a newly added account's worker: it takes no turn before
// this replica holds the lease (supervisor.Members).
func (c *Cluster) Joined(w *supervisor.Worker) { c.adm.Fence(w.Name(), notLeased) }

// Left releases the lease of an account whose worker is gone
// (supervisor.Members).
func (c *Cluster) Left(name string) {
	c.mu.Lock()
	h, mine := c.held[name]
	delete(c.held, name)
	delete(c.releasing, name)
	c.mu.Unlock()
	if !mine {
		return
	}
	c.release(name, h.token, "account removed from this replica's configuration")
}

// release gives the lease back, bounded by one tick.
func (c *Cluster) release(name string, token int64, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), c.interval())
	defer cancel()
	if err := c.store.ReleaseLease(ctx, name, c.cfg.ID, token); err != nil {
		c.log.Warn("release lease", "account", name, "err", err)
		return
	}
	c.log.Info("lease released", "account", name, "token", token, "why", why)
}

// unheld drops a lease just won for an account whose worker is no longer
// there to start (it was removed while the lease was being acquired).
func (c *Cluster) unheld(name string, h *heldLease) {
	c.drop(name, h, time.Now())
	c.release(name, h.token, "account removed while its lease was acquired")
}
