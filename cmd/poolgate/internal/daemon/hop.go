package daemon

import (
	"net/http"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/poolgate/poolgate/internal/access"
	"github.com/poolgate/poolgate/internal/config"
	"github.com/poolgate/poolgate/internal/telemetry"
	"github.com/poolgate/poolgate/pool/cluster"
)

// newHop is the one hop between replicas: its keys derived from the
// cluster token for this replica run, its client dialing only the peer
// networks.
func newHop(cfg config.Config, self string, tp trace.TracerProvider) (*cluster.Proxy, error) {
	hops, err := access.NewHops(cfg.ClusterToken, self, cfg.AdvertiseURL)
	if err != nil {
		return nil, err
	}
	nets, err := cfg.PeerNetworks()
	if err != nil {
		return nil, err
	}
	return &cluster.Proxy{Hops: hops, Client: hopClient(tp, nets), WriteTimeout: cfg.WriteTimeout}, nil
}

// hopClient is the client one replica forwards requests with: it dials
// only addresses in nets (a replica URL in Redis is not trusted for being
// there) and never through a proxy; with tracing on, each forward is a
// client span whose traceparent goes with the request, so the trace goes on
// at the holder.
func hopClient(tp trace.TracerProvider, nets cluster.PeerNetworks) *http.Client {
	var rt http.RoundTripper = &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second,
		DialContext: nets.Dialer(10 * time.Second).DialContext, TLSHandshakeTimeout: 10 * time.Second}
	if telemetry.Enabled(tp) {
		rt = otelhttp.NewTransport(rt, otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(telemetry.Propagator),
			otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return "forward " + r.Method }))
	}
	return &http.Client{Transport: rt}
}
