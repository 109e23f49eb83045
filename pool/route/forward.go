package route

import (
	"context"
)

// Remote locates other replicas; pool/cluster's Cluster implements it.
type Remote interface {
	// Owner returns the URL of the other replica that holds the account.
	Owner(account string) (string, bool)
	// Spare returns another replica with free capacity whose accounts
	// serve the model ("": any model).
	Spare(model string) (string, bool)
}

// holder returns the URL of the replica that should serve rq instead of
// this one, "" when it is served here: the replica that holds its
// conversation's upstream session, or, when no instance here that serves
// its model is ready, one with spare capacity that serves it. The hop
// itself is the caller's (and so is its span).
func (r *Router) holder(ctx context.Context, rq *request) string {
	if !rq.mayHop || r.remote == nil {
		return ""
	}
	var target string
	var ok bool
	switch {
	case rq.hasHit && !r.pool.Serves(rq.hit.Instance):
		target, ok = r.remote.Owner(rq.hit.Instance)
	case !rq.hasHit && !r.pool.anyReady(&rq.target):
		model := "" // a model nobody has listed yet: any replica may serve it
		if rq.target.listed {
			model = rq.model
		}
		target, ok = r.remote.Spare(model)
	}
	if !ok {
		return ""
	}
	if rq.hasHit {
		// The holder looks the conversation up again: give the entry back.
		_ = r.store.PutAffinity(context.WithoutCancel(ctx), rq.key, rq.hit)
		rq.hasHit = false
	}
	return target
}
