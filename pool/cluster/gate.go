package cluster

import (
	"sync/atomic"

	"github.com/poolgate/poolgate/pool/supervisor"
)

// Automatic logins in a cluster. A login drives a browser for tens of
// seconds and an upstream may lock an account that fails too many; one
// started on an account that the next balance hands over is cut halfway and
// counts against the account. So a replica starts logins only for the
// accounts it keeps, and a hand-over that still cuts one (a replica joined
// while it ran) ends it through LoginTarget.Released: the runner abandons it
// without counting a failure or backing off.

// LoginGate is a login runner that starts automatic logins only for
// accounts this replica keeps: it holds the lease, is not handing the
// account over, and its last balance found nothing to give away. The
// supervisor asks again at every health check while the worker is logged
// out, so a login held back starts within one health interval of the
// replica settling.
//
// The supervisor and the cluster need each other (the cluster drives the
// supervisor's workers; the supervisor's logins ask the cluster), so the
// gate is made first and given to both at construction: to the supervisor
// as its Loginer, to the cluster as Config.Logins. Until the cluster is
// made, the replica keeps nothing and the gate starts no login.
type LoginGate struct {
	next supervisor.Loginer
	c    atomic.Pointer[Cluster] // the cluster made with this gate
}

var _ supervisor.Loginer = (*LoginGate)(nil)

// NewLoginGate returns a gate in front of l.
func NewLoginGate(l supervisor.Loginer) *LoginGate { return &LoginGate{next: l} }

// Ensure starts a login through the runner behind the gate when this
// replica keeps the account.
func (g *LoginGate) Ensure(t supervisor.LoginTarget) {
	if c := g.c.Load(); c != nil && c.keeps(t.Instance) {
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
