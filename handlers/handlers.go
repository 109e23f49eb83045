// Package handlers is poolgate's edge: the public HTTP API on gin. It holds
// the middleware (request id, who may call, body cap, browser guard,
// access log), serves the endpoints of the protocols table (one
// relay.Protocol per answer API, which the wiring hands to New), runs
// every turn the same way in one function (edge.answer in edge.go: decode
// through the protocol, open through the router or hop to the replica that
// holds the turn, encode with the protocol's encoder), counts tokens and
// lists models for the protocols that have them, and keeps the per-key
// accounting. It names no protocol: what it knows of one (its endpoints,
// the requests it claims, the key its clients send, its error shape) the
// protocol says through relay.Protocol (table.go). The protocols live in
// handlers/openaichat, responses, anthropic and gemini (plain net/http, no
// gin); relay carries answers from the pool to the client for all of
// them, apierr classifies errors, openaierr is OpenAI's error shape (the
// edge's own when the table has no protocol).
package handlers

import (
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"go.opentelemetry.io/otel/trace"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/internal/access"
	"github.com/poolgate/poolgate/internal/apikey"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/metrics"
	"github.com/poolgate/poolgate/internal/telemetry"
	"github.com/poolgate/poolgate/pool/cluster"
)

// Config configures the public API.
type Config struct {
	// Credentials are the keys and tokens in force (keys swapped by a
	// reload); who may call each route is decided from them in one place
	// (Authorize). No keys opens the API (the daemon allows that only on
	// loopback, or when the operator says insecure).
	Credentials *access.Credentials
	// AdminError writes a refusal on the admin surface in the admin API's
	// shape (nil: the caller's protocol shape).
	AdminError AdminErrorFunc
	// Accounting limits and records each key's use (nil: none).
	Accounting *Accounting
	// MaxBodyBytes caps request bodies (default 16 MiB). How long a body may
	// take to arrive is bounded around the whole engine, before any
	// middleware (httpx.Deadlines, which the daemon wraps every listener in).
	MaxBodyBytes int64
	// BodyBudget caps the bytes of the API's request bodies held at once
	// (nil: no cap).
	BodyBudget *httpx.Budget
	// Insecure says the listener may be public without API keys (the
	// operator's explicit choice): requests for any host name are served.
	Insecure bool
	// Hop carries a client's turn to the replica that holds it (nil: a
	// single node, whose turns are all served here).
	Hop *cluster.Proxy
	// Tracing traces each request (nil or a no-op provider: off, at no
	// cost).
	Tracing trace.TracerProvider
	// Router answers the turns (*route.Router); Models lists the pool's
	// models, which each protocol that has a listing writes in its shape.
	Router Opener
	Models ModelLister
	// CountSlots bound the token counts done at once, which take no worker
	// slot (nil: GOMAXPROCS of them, waited for up to 5s).
	CountSlots *httpx.Slots
}

// ModelLister lists the pool's models.
type ModelLister interface {
	Models() []chat.Model
}

// New returns the gin engine serving the public API: the endpoints of
// apis, the protocols table (handlers/protocols builds it; a protocol is one
// package and one line there), whose turns it runs and whose series it adds
// to m.
func New(cfg Config, apis []relay.Protocol, m *metrics.Metrics, log *slog.Logger) *gin.Engine {
	gin.SetMode(gin.ReleaseMode)
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 16 << 20
	}
	if cfg.CountSlots == nil {
		cfg.CountSlots = httpx.NewSlots(0, 0)
	}
	t := newTable(apis)
	e := gin.New()
	e.HandleMethodNotAllowed = true
	if telemetry.Enabled(cfg.Tracing) {
		e.Use(t.trace(cfg.Tracing))
	}
	e.Use(RequestID(log), t.recover(log))
	if cfg.Credentials == nil {
		cfg.Credentials = &access.Credentials{Keys: apikey.NewRegistry(nil)}
	}
	if cfg.Accounting == nil {
		cfg.Accounting = &Accounting{}
	}
	cfg.Accounting.tracer = telemetry.New(cfg.Tracing, tracerScope)
	keys := cfg.Credentials.Keys
	g := &gate{t: t, cr: cfg.Credentials, adminErr: cfg.AdminError}
	e.Use(t.browserGuard(cfg.Insecure, func() bool { return keys.Load().Len() == 0 }), g.authorize)
	e.NoRoute(t.notFound)
	e.NoMethod(t.notAllowed)

	ed := &edge{router: cfg.Router, hop: cfg.Hop, tracer: cfg.Accounting.tracer, capture: cfg.Accounting.Capture}
	s := &server{t: t, gate: g, edge: ed, m: m, acct: cfg.Accounting, log: log, models: cfg.Models,
		maxBody: cfg.MaxBodyBytes, budget: cfg.BodyBudget, counts: cfg.CountSlots}
	for _, p := range apis {
		m.AddAPI(p.Relay().Name(), p.Relay().DroppedFields())
	}
	for _, k := range t.order {
		e.Handle(k.method, k.path, s.endpoint(t.owners[k]))
	}
	if hops := cfg.Credentials.Hops; hops != nil {
		// Where a replica proves to the others that it holds the cluster
		// key, before they forward anything to its URL.
		e.GET(access.ProofPath, gin.WrapF(hops.ServeProof))
	}
	return e
}

func itoa(n int) string {
	// Status codes are three digits; avoid strconv's allocation on the hot path.
	if n >= 100 && n < 1000 {
		return string([]byte{byte('0' + n/100), byte('0' + n/10%10), byte('0' + n%10)})
	}
	return "0"
}

// NewAdmin returns the engine of an admin listener of its own, for
// admin.Register: request ids, recovery, the same authorization as the API
// listener; and when open is not nil (no admin token, so the listener is
// loopback-only), the browser guard while open says the gateway has no API
// key.
func NewAdmin(cr *access.Credentials, adminErr AdminErrorFunc, log *slog.Logger, open func() bool) *gin.Engine {
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	t := newTable(nil)
	e.Use(RequestID(log), t.recover(log))
	if open != nil {
		e.Use(t.browserGuard(false, open))
	}
	e.Use((&gate{t: t, cr: cr, adminErr: adminErr}).authorize)
	return e
}

// RequestID takes the client's x-request-id (when sane) or mints one (from
// the trace id when the request is traced, so one id finds the trace too),
// puts it on the response before anything else is written, into the request
// context, and logs one access line per request.
func RequestID(log *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		id := c.GetHeader("X-Request-Id")
		traceID := telemetry.TraceID(c.Request.Context())
		if !saneID(id) {
			if traceID != "" {
				id = "req_" + traceID
			} else {
				var b [12]byte
				_, _ = rand.Read(b[:])
				id = "req_" + hex.EncodeToString(b[:])
			}
		}
		c.Header("X-Request-Id", id)
		c.Request = c.Request.WithContext(httpx.WithRequestID(c.Request.Context(), id))
		start := time.Now()
		c.Next()
		// The key's name, never the key: "" when auth is off or refused.
		var buf [7]slog.Attr
		attrs := append(buf[:0], slog.String("request_id", id), slog.String("method", c.Request.Method),
			slog.String("path", c.Request.URL.Path), slog.Int("status", c.Writer.Status()),
			slog.Duration("duration", time.Since(start)), slog.String("key", access.From(c.Request.Context()).KeyName()))
		if traceID != "" {
			attrs = append(attrs, slog.String("trace_id", traceID))
		}
		log.LogAttrs(c.Request.Context(), slog.LevelInfo, "request", attrs...)
	}
}

func saneID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// recover turns a handler panic into a 500 in the caller's protocol (and a
// log line with the stack), never a dropped connection without an answer.
func (t *table) recover(log *slog.Logger) gin.HandlerFunc {
	return gin.CustomRecoveryWithWriter(nil, func(c *gin.Context, err any) {
		log.Error("handler panic", "request_id", httpx.RequestID(c.Request.Context()), "panic", err)
		if !c.Writer.Written() {
			t.writeError(c, http.StatusInternalServerError, "internal error")
		}
		c.Abort()
	})
}

// bodyCap limits the request's body in size, and in bytes held at once
// across the gateway and by one key: one announced larger than the cap is
// refused at once, and protocol decoders turn the overflow of one that was
// not into 413; one the budget (or the key's share of it) has no room for
// gets 429 with Retry-After before it is read (a body of unknown length
// reserves its room as it arrives, and the reader fails when there is
// none). Refusals come in the caller's protocol. The caller gives the room
// back under key once the request is over, however it ends: held bytes, or
// what b took. Every write to the client has a deadline (httpx.Conns), so
// one that does not read its answer ends it too. How long a body may take
// is bounded before any middleware runs (httpx.Deadlines), and a refusal
// written before its body was read closes the connection there.
func (s *server) bodyCap(c *gin.Context) (key string, held int64, b *budgetBody, ok bool) {
	r, n, budget := c.Request, s.maxBody, s.budget
	if r.ContentLength > n {
		s.t.writeError(c, http.StatusRequestEntityTooLarge, "request body exceeds "+formatBytes(n))
		return "", 0, nil, false
	}
	r.Body = http.MaxBytesReader(c.Writer, r.Body, n)
	key = budgetKey(access.From(r.Context()))
	switch {
	case budget == nil || r.ContentLength == 0:
	case r.ContentLength > 0:
		if !budget.Take(key, r.ContentLength) {
			p := apierr.Classify(httpx.ErrBudget)
			s.t.writeProblem(c.Writer, r, &p)
			return "", 0, nil, false
		}
		return key, r.ContentLength, nil, true
	default:
		b = &budgetBody{Reader: httpx.Reader{R: r.Body, B: budget, Key: key}, Closer: r.Body}
		r.Body = b
	}
	return key, 0, b, true
}

// budgetKey names the key whose share of the body budget a caller's
// bodies take: its API key (also on a hop, which carries it), none on an
// open gateway, whose callers are one.
func budgetKey(c access.Caller) string {
	if c.Key == nil || c.Open {
		return ""
	}
	return c.Key.Name
}

// budgetBody is a body of unknown length read under the budget.
type budgetBody struct {
	httpx.Reader
	io.Closer
}

func formatBytes(n int64) string {
	if n%(1<<20) == 0 {
		return strconv.FormatInt(n>>20, 10) + " MiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
