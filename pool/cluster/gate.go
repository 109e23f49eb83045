package cluster

import "github.com/poolgate/poolgate/pool/supervisor"

// Automatic logins in a cluster. A login drives a browser for tens of
// seconds and an upstream may lock an account that fails too many; one
// started on an account that the next balance hands over is cut halfway and
// counts against the account. So a replica starts logins only for the
// accounts it keeps, and a hand-over that still cuts one (a replica joined
// while it ran) ends it through LoginTarget.Released: the runner abandons it
// without counting a failure or backing off.

// GateLogins returns l wrapped so that a replica starts automatic logins
// only for accounts it keeps: it holds the lease, is not handing the account
// over, and its last balance found nothing to give away. The supervisor
// asks again at every health check while the worker is logged out, so a
// login held back starts within one health interval of the replica settling.
func (c *Cluster) GateLogins(l supervisor.Loginer) supervisor.Loginer {
	return gatedLoginer{c: c, next: l}
}

type gatedLoginer struct {
	c    *Cluster
	next supervisor.Loginer
}

func (g gatedLoginer) Ensure(t supervisor.LoginTarget) {
	if g.c.keeps(t.Instance) {
		g.next.Ensure(t)
	}
}

// keeps reports whether this replica means to go on serving the account.
func (c *Cluster) keeps(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, mine := c.held[name]
	return mine && !c.releasing[name] && c.settled
}
