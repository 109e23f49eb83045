package access

// Need is the set of callers a route admits.
type Need int

// What a route needs. Each is a set of callers; docs/security.md shows the
// table of routes and callers these make.
const (
	// Public admits everyone: the probes and the dashboard's page, which
	// holds no data.
	Public Need = iota + 1
	// APIUser admits any API key in force, whatever its role; everyone on
	// an open gateway.
	APIUser
	// Own admits any API key, which then reads only its own records;
	// viewers and admins read everyone's.
	Own
	// Viewer admits viewers and admins: the admin API's reads.
	Viewer
	// Admin admits admins only: everything that changes or reveals an
	// account (restarts, logins, bundles, reloads).
	Admin
	// Metrics admits the metrics token, viewers and admins; everyone when
	// metrics are public.
	Metrics
)

// Rule is one route of the HTTP surface and the callers it admits.
type Rule struct {
	// Method and Path as the router matches them (":name" for a parameter,
	// "*name" for the rest of the path).
	Method, Path string
	Need         Need
	// Clustered: the route exists only on a replica of a cluster.
	Clustered bool
}

// Routes is the operator surface's table: every route poolgate serves
// besides the answer APIs, on whichever listener carries it. The answer
// APIs' routes are the protocols table's endpoints, each admitting any API
// user (APIUser): the edge makes their rules from that table
// (handlers.Routes), so a protocol is one package and one line there. The
// edge refuses a route that neither names.
var Routes = []Rule{
	{"GET", "/healthz", Public, false},
	{"GET", "/readyz", Public, false},
	{"GET", "/admin", Public, false},
	{"HEAD", "/admin", Public, false},
	{"GET", "/metrics", Metrics, false},
	// A challenge to prove the cluster key, from another replica that is
	// about to forward a request here: it carries no credential, and the
	// answer holds none.
	{"GET", ProofPath, Public, true},

	{"GET", "/internal/usage", Own, false},
	{"GET", "/internal/requests", Own, false},

	{"GET", "/internal/pool", Viewer, false},
	{"GET", "/internal/stats", Viewer, false},
	{"GET", "/internal/live", Viewer, false},
	{"GET", "/internal/cluster", Viewer, true},
	{"GET", "/internal/auto-login/status", Viewer, false},

	{"POST", "/internal/pool/:instance/restart", Admin, false},
	{"POST", "/internal/pool/:instance/drain", Admin, false},
	{"POST", "/internal/pool/:instance/cooldown/clear", Admin, false},
	{"POST", "/internal/pool/:instance/probe", Admin, false},
	{"GET", "/internal/models/raw", Admin, false},
	{"DELETE", "/internal/session/affinity", Admin, false},
	{"POST", "/internal/auto-login/start", Admin, false},
	{"GET", "/internal/auto-login/url", Admin, false},
	{"GET", "/internal/auto-login/:instance/screenshot", Admin, false},
	{"GET", "/internal/auto-login/:instance/callback", Admin, false},
	{"POST", "/internal/session/export", Admin, false},
	{"POST", "/internal/session/import", Admin, false},
	{"POST", "/internal/reload", Admin, false},
}

// NeedOf returns what the route method path (as the router matched it)
// needs; false for a route Routes does not list.
func NeedOf(method, path string) (Need, bool) {
	for i := range Routes {
		if Routes[i].Method == method && Routes[i].Path == path {
			return Routes[i].Need, true
		}
	}
	return 0, false
}
