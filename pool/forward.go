package pool

import (
	"context"
	"errors"

	"github.com/poolgate/poolgate/internal/telemetry"
)

// Remote locates other replicas; pool/cluster's Cluster implements it.
type Remote interface {
	// Owner returns the URL of the other replica that holds the account.
	Owner(account string) (string, bool)
	// Spare returns another replica with free capacity.
	Spare() (string, bool)
}

// Forwarder proxies the request being served to the replica at url and
// writes that replica's answer to the client. It returns an error only when
// nothing was written (the replica could not be reached), so the request can
// still be served here.
type Forwarder func(ctx context.Context, url string) error

type forwarderKey struct{}

// WithForwarder lets the router forward the request in ctx. The HTTP layer
// sets it on requests from clients, never on requests another replica
// forwarded: one hop at most.
func WithForwarder(ctx context.Context, f Forwarder) context.Context {
	return context.WithValue(ctx, forwarderKey{}, f)
}

// ErrForwarded is returned by Chat when another replica answered the request;
// the response is already written.
var ErrForwarded = errors.New("request answered by another replica")

// SetRemote enables forwarding to other replicas; call before serving.
func (r *Router) SetRemote(rm Remote) { r.remote = rm }

// forwardRemote sends the request to the replica that holds its conversation, or,
// when no local instance can serve, to one with spare capacity. It reports
// whether the request was answered there.
func (r *Router) forwardRemote(ctx context.Context, rq *request) bool {
	fw, ok := ctx.Value(forwarderKey{}).(Forwarder)
	if !ok || r.remote == nil {
		return false
	}
	var target string
	switch {
	case rq.hasHit && !r.pool.Serves(rq.hit.Instance):
		target, ok = r.remote.Owner(rq.hit.Instance)
	case !rq.hasHit && !r.pool.anyReady():
		target, ok = r.remote.Spare()
	default:
		return false
	}
	if !ok {
		return false
	}
	if rq.hasHit {
		// The owner looks the conversation up again: give the entry back.
		_ = r.store.PutAffinity(context.WithoutCancel(ctx), rq.key, rq.hit)
	}
	fctx, span := r.tracer.Start(ctx, telemetry.SpanForward)
	err := fw(fctx, target)
	endForwardSpan(span, target, err)
	if err != nil {
		r.log.Warn("forward to replica failed, serving here", "target", target, "err", err, "request_id", rq.RequestID)
		return false
	}
	return true
}
