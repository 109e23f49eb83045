// Package access decides who may call which route, once, for every
// listener: it names the caller of a request from the credentials it
// presents (an API key and its role, the admin token, the metrics token),
// or from the signed hop of a replica that forwarded it (hop.go), and holds
// the one table that says which callers each route admits. The HTTP edge
// (handlers) applies it before any route runs; every other layer asks the
// Caller it put into the request context, never a raw header.
//
// It knows nothing of gin or of any protocol's error shape: a refusal is a
// Verdict with a status and a message, which the edge writes in the shape of
// the route's caller.
package access

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/poolgate/poolgate/internal/apikey"
)

// Role is what a named API key may do besides calling the API.
type Role string

// The roles of a key. A key is a user unless the operator made it more.
const (
	// RoleUser calls the API and reads its own usage and request log.
	RoleUser Role = "user"
	// RoleViewer also reads the pool, the cluster, every key's usage and
	// the request log (without prompts or answers); it changes nothing.
	RoleViewer Role = "viewer"
	// RoleAdmin may do everything the admin API offers.
	RoleAdmin Role = "admin"
)

// Credentials are the secrets in force. The keys are read per request, so a
// reload that swaps them takes effect from the next request on.
type Credentials struct {
	// Keys are the API keys; none means the API is open (the daemon allows
	// that only on loopback, or when the operator said insecure).
	Keys *apikey.Registry
	// AdminToken is the bare admin credential ("" = none).
	AdminToken string
	// MetricsToken alone opens /metrics when set ("" = the admin API's
	// readers may scrape); MetricsPublic opens it to everyone.
	MetricsToken  string
	MetricsPublic bool
	// Hops verifies the hops of the other replicas (nil = not clustered:
	// every hop is refused).
	Hops *Hops
	// Owners makes the digests that keep callers' conversations and
	// stored Responses apart (nil: digests under no key, OwnerOf; for
	// tests, never a daemon).
	Owners *Owners
}

// Caller is who sent a request, as the edge established it.
type Caller struct {
	// Key is the API key the request presented and that is in force; in
	// an open gateway (no keys), a nameless key holding whatever was
	// presented, which still keeps callers' conversations apart. Nil when
	// no key was accepted.
	Key *apikey.Key
	// Role is the key's role, RoleAdmin for the admin token and for anyone
	// on an open gateway without an admin token; "" for nobody.
	Role Role
	// Token names a bare token that was presented and matched:
	// "admin-token" or "metrics-token".
	Token string
	// Open: no API keys are configured (the keyless loopback demo).
	Open bool
	// Replica names the replica that forwarded the request, proven by its
	// signed hop; "" for a request that came from a client.
	Replica string
	// Owner keeps the caller's conversations and stored Responses apart
	// from everyone else's.
	Owner Owner

	answer string // AnswerHeader's value for a hop's answer
}

// HopAnswer is the value of AnswerHeader the answer to a forwarded request
// carries, "" for a request from a client.
func (c Caller) HopAnswer() string { return c.answer }

// Name says who acted, for logs: "key:NAME", "admin-token",
// "metrics-token", "open" (a keyless gateway) or "anonymous". Never a
// secret.
func (c Caller) Name() string {
	switch {
	case c.Token != "":
		return c.Token
	case c.Key != nil && c.Key.Name != "":
		return "key:" + c.Key.Name
	case c.Open:
		return "open"
	}
	return "anonymous"
}

// KeyName is the caller's key's name, "" when it has none.
func (c Caller) KeyName() string {
	if c.Key != nil {
		return c.Key.Name
	}
	return ""
}

// SeesAll reports whether the caller reads every key's usage and log
// (admins and viewers), not only its own.
func (c Caller) SeesAll() bool { return c.Role == RoleAdmin || c.Role == RoleViewer }

// SeesContent reports whether the caller may read prompts and answers kept
// in the request log: admins only.
func (c Caller) SeesContent() bool { return c.Role == RoleAdmin }

// Identify names the caller of r, or refuses it (false, and the Verdict
// says why). A request another replica forwarded is named by its signed hop
// alone, whatever credentials it carries besides: Identify verifies the hop
// (signature, this replica as its audience, the request, expiry, nonce)
// and reads the body, checking it against the signed digest, so the handler
// reads the body that was signed. A hop that fails any check is refused,
// as are the older versions' hop headers: a client must never pass for a
// replica. The request's body must be closed once the request is over (the
// edge does), which removes a large hop body's temporary file.
func (cr *Credentials) Identify(r *http.Request) (Caller, Verdict, bool) {
	if r.Header.Get(legacyHopHeader) != "" || r.Header.Get(legacyTokenHeader) != "" {
		return Caller{}, hopRefused("this replica takes only signed hops (" + HopHeader + "); " + legacyHopHeader +
			" and the cluster token are not credentials: every replica must run the same version"), false
	}
	if r.Header.Get(HopHeader) != "" {
		return cr.identifyHop(r)
	}
	var c Caller
	presented := apikey.FromRequest(r)
	set := cr.Keys.Load()
	c.Open = set.Len() == 0
	switch {
	case cr.AdminToken != "" && equal(presented, cr.AdminToken):
		c.Token, c.Role = "admin-token", RoleAdmin
	case cr.MetricsToken != "" && equal(presented, cr.MetricsToken):
		c.Token = "metrics-token"
	case c.Open:
		c.Key = &apikey.Key{Secret: presented}
		if cr.AdminToken == "" {
			c.Role = RoleAdmin // the keyless loopback demo: nothing to tell callers apart
		}
	default:
		if k, ok := set.Lookup(presented); ok {
			c.Key, c.Role = k, Role(k.Role)
			if c.Role == "" {
				c.Role = RoleUser
			}
		}
	}
	secret := ""
	if c.Key != nil {
		secret = c.Key.Secret
	}
	c.Owner = cr.Owners.Of(secret)
	return c, Verdict{}, true
}

// identifyHop names the caller of a forwarded request from its hop.
func (cr *Credentials) identifyHop(r *http.Request) (Caller, Verdict, bool) {
	if cr.Hops == nil {
		return Caller{}, hopRefused(HopHeader + " is accepted only from a replica of this cluster, and this gateway is not clustered"), false
	}
	claims, err := cr.Hops.verify(r)
	if err == nil {
		err = readHopBody(r, claims)
	}
	if errors.Is(err, errTooManyHop) {
		return Caller{}, Verdict{Status: http.StatusServiceUnavailable, Code: "hop_refused", Message: err.Error()}, false
	}
	if err != nil {
		return Caller{}, hopRefused(err.Error()), false
	}
	c := claims.Caller.caller(claims.From)
	c.answer = cr.Hops.answerFor(claims)
	return c, Verdict{}, true
}

// readHopBody reads r's body, checks it against the hop's claims and puts
// it back for the handler.
func readHopBody(r *http.Request, claims hopClaims) error {
	body, err := ReadHopBody(r.Body, claims.Length)
	if err != nil || body.Len() != claims.Length || body.Digest() != claims.Body {
		body.Close()
		return fmt.Errorf("%w: its body is not the one signed", ErrHop)
	}
	r.Body = hopBodyCloser{Reader: body.Reader(), body: body}
	return nil
}

func hopRefused(msg string) Verdict {
	return Verdict{Status: http.StatusUnauthorized, Code: "invalid_hop", Message: msg}
}

func equal(got, want string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// StripHop removes the replica headers from r once Identify read them, so
// nothing behind the edge (a worker, a login callback) ever sees them.
func StripHop(r *http.Request) {
	for _, h := range []string{HopHeader, AnswerHeader, legacyHopHeader, legacyTokenHeader} {
		r.Header.Del(h)
	}
}

// Verdict is a refusal: the status, a stable code and a message that names
// what would be accepted.
type Verdict struct {
	Status  int
	Code    string
	Message string
}

// Decide says whether c may call a route that needs n. A zero Verdict
// admits.
func (cr *Credentials) Decide(n Need, c Caller) (Verdict, bool) {
	switch n {
	case Public:
		return Verdict{}, true
	case APIUser:
		if c.Open || c.Key != nil {
			return Verdict{}, true
		}
		return unauthorized("invalid or missing API key"), false
	case Own:
		if c.KeyName() != "" || c.SeesAll() {
			return Verdict{}, true
		}
		return cr.needRole(c, RoleViewer)
	case Viewer:
		return cr.needRole(c, RoleViewer)
	case Admin:
		return cr.needRole(c, RoleAdmin)
	case Metrics:
		if cr.MetricsPublic || c.Token == "metrics-token" {
			return Verdict{}, true
		}
		if c.Key != nil && c.Role != RoleViewer && c.Role != RoleAdmin {
			// The Python gateway let any API key scrape; say what does now.
			return Verdict{Status: http.StatusForbidden, Code: "forbidden", Message: "API key " + c.KeyName() + " is a user's key, " +
				"which does not open /metrics: Prometheus sends the metrics token (POOLGATE_METRICS_TOKEN), or a key with role viewer or admin"}, false
		}
		return cr.needRole(c, RoleViewer)
	}
	return Verdict{Status: http.StatusForbidden, Code: "forbidden", Message: "this route has no access rule"}, false
}

// needRole admits an admin, or a viewer when a viewer is enough.
func (cr *Credentials) needRole(c Caller, want Role) (Verdict, bool) {
	if c.Role == RoleAdmin || (want == RoleViewer && c.Role == RoleViewer) {
		return Verdict{}, true
	}
	if !cr.adminConfigured() {
		return Verdict{Status: http.StatusForbidden, Code: "forbidden", Message: "no admin credential is configured, so no " +
			"caller may use the admin API: set POOLGATE_ADMIN_TOKEN, or give an api_keys entry role: admin (or viewer to read)"}, false
	}
	if c.Key != nil && c.Key.Name != "" {
		need := "admin"
		if want == RoleViewer {
			need = "viewer or admin"
		}
		return Verdict{Status: http.StatusForbidden, Code: "forbidden", Message: "API key " + c.Key.Name + " has role " +
			string(c.Role) + "; this route needs role " + need}, false
	}
	if c.Token == "metrics-token" {
		return Verdict{Status: http.StatusForbidden, Code: "forbidden", Message: "the metrics token opens /metrics only"}, false
	}
	msg := "admin credential required: the admin token, or an API key with role admin"
	if want == RoleViewer {
		msg += " or viewer"
	}
	return unauthorized(msg), false
}

// adminConfigured reports whether any caller could be an admin or viewer.
func (cr *Credentials) adminConfigured() bool {
	if cr.AdminToken != "" {
		return true
	}
	set := cr.Keys.Load()
	if set.Len() == 0 {
		return false // open: handled before, as the demo's admin
	}
	for _, r := range set.Roles() {
		if r == string(RoleAdmin) || r == string(RoleViewer) {
			return true
		}
	}
	return false
}

func unauthorized(msg string) Verdict {
	return Verdict{Status: http.StatusUnauthorized, Code: "unauthorized", Message: msg}
}

type callerKey struct{}

// WithCaller returns ctx carrying the request's caller.
func WithCaller(ctx context.Context, c Caller) context.Context {
	p := new(Caller)
	*p = c
	return context.WithValue(ctx, callerKey{}, p)
}

// From returns the caller the edge put into ctx (the zero Caller, nobody,
// when none).
func From(ctx context.Context) Caller {
	if p, _ := ctx.Value(callerKey{}).(*Caller); p != nil {
		return *p
	}
	return Caller{}
}

// IsAdminPath reports whether path belongs to the admin surface, whose
// refusals come in the admin API's error shape.
func IsAdminPath(path string) bool {
	return strings.HasPrefix(path, "/internal/") || path == "/metrics" || path == "/admin"
}
