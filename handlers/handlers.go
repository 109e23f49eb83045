// Package handlers is poolgate's edge: the public HTTP API on gin. It holds
// the middleware (request id, who may call, body cap, browser guard,
// access log), registers the routes of the protocols table (Protocols.APIs,
// one relay.Protocol per answer API), runs every turn the same way in one
// function (edge.answer in edge.go: decode through the protocol, open
// through the router or hop to the replica that holds the turn, encode with
// the protocol's encoder), keeps the per-key accounting, and answers the
// errors the HTTP layer answers itself and the model listings. The
// protocols live in openaichat, responses, anthropic and gemini (plain
// net/http, no gin), which only decode and encode; relay carries answers
// from the pool to the client for all of them, apierr classifies errors,
// openaierr is OpenAI's error shape.
package handlers

import (
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
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
	// (Authorize). No keys opens the API (main allows that only on
	// loopback, or when the operator says insecure).
	Credentials *access.Credentials
	// AdminError writes a refusal on the admin surface in the admin API's
	// shape (nil: the caller's protocol shape).
	AdminError AdminErrorFunc
	// Accounting limits and records each key's use (nil: none).
	Accounting *Accounting
	// MaxBodyBytes caps request bodies (default 16 MiB). How long a body may
	// take to arrive is bounded around the whole engine, before any
	// middleware (httpx.Deadlines, which main wraps every listener in).
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
	// PythonCompat adds the Python gateway's "detail" to error bodies
	// (PythonErrors). Default off.
	PythonCompat bool
}

// ModelLister lists the pool's models.
type ModelLister interface {
	Models() []chat.Model
}

// Protocols are the answer APIs the edge serves, the router that answers
// them and the pool's models, which the edge lists in each protocol's
// shape.
type Protocols struct {
	Router Opener
	// APIs is the protocols table: one protocol package's codec each,
	// whose routes the edge registers and whose turns it runs (adding a
	// protocol is one package and one line here, where main builds it).
	APIs   []relay.Protocol
	Models ModelLister
}

// New returns the gin engine serving the public API.
func New(cfg Config, p Protocols, m *metrics.Metrics, log *slog.Logger) *gin.Engine {
	gin.SetMode(gin.ReleaseMode)
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 16 << 20
	}
	e := gin.New()
	e.HandleMethodNotAllowed = true
	if telemetry.Enabled(cfg.Tracing) {
		e.Use(Trace(cfg.Tracing))
	}
	e.Use(RequestID(log))
	if cfg.PythonCompat {
		e.Use(PythonErrors()) // outside Recover, so that a panic's answer gets its detail too
	}
	e.Use(Recover(log))
	if cfg.Credentials == nil {
		cfg.Credentials = &access.Credentials{Keys: apikey.NewRegistry(nil)}
	}
	if cfg.Accounting == nil {
		cfg.Accounting = &Accounting{}
	}
	cfg.Accounting.tracer = telemetry.New(cfg.Tracing, tracerScope)
	keys := cfg.Credentials.Keys
	e.Use(BrowserGuard(cfg.Insecure, func() bool { return keys.Load().Len() == 0 }),
		Authorize(cfg.Credentials, cfg.AdminError))
	e.NoRoute(notFound)
	e.NoMethod(notAllowed)

	api := e.Group("", BodyCap(cfg.MaxBodyBytes, cfg.BodyBudget))
	ed := &edge{router: p.Router, hop: cfg.Hop, tracer: cfg.Accounting.tracer, capture: cfg.Accounting.Capture}
	for _, proto := range p.APIs {
		for _, rt := range proto.Endpoints() {
			api.Handle(rt.Method, rt.Path, serveRoute(m, cfg.Accounting, log, ed, proto, rt))
		}
	}
	api.GET("/v1/models", models(p.Models))
	for _, v := range []string{"/v1beta", "/v1"} {
		api.GET(v+"/models/*name", model(p.Models))
	}
	api.GET("/v1beta/models", geminiModels(p.Models))
	if hops := cfg.Credentials.Hops; hops != nil {
		// Where a replica proves to the others that it holds the cluster
		// key, before they forward anything to its URL.
		e.GET(access.ProofPath, gin.WrapF(hops.ServeProof))
	}
	return e
}

// serveRoute serves a protocol's route as its kind says: a turn by the
// edge under the caller's key (observe), a token count under the key's
// limits (limited), anything else as the protocol serves it. The route's
// parameters are the request's path values.
func serveRoute(m *metrics.Metrics, acct *Accounting, log *slog.Logger, e *edge, p relay.Protocol, rt relay.Endpoint) gin.HandlerFunc {
	turn := observe(m, acct, log, e, p)
	var count gin.HandlerFunc
	if rt.Serve != nil {
		count = limited(m, acct, log, rt.Serve)
	}
	return func(c *gin.Context) {
		for _, pv := range c.Params {
			c.Request.SetPathValue(pv.Key, pv.Value)
		}
		kind := rt.Serves
		if rt.Pick != nil {
			kind = rt.Pick(c.Request)
		}
		switch kind {
		case relay.ServeTurn:
			turn(c)
		case relay.ServeCount:
			count(c)
		case relay.ServePlain:
			rt.Serve(c.Writer, c.Request)
		default:
			notFound(c)
		}
	}
}

func itoa(n int) string {
	// Status codes are three digits; avoid strconv's allocation on the hot path.
	if n >= 100 && n < 1000 {
		return string([]byte{byte('0' + n/100), byte('0' + n/10%10), byte('0' + n%10)})
	}
	return "0"
}

// isAnthropic reports whether a request speaks the Anthropic protocol, so
// errors outside its handler still come in its shape (gemini.IsRequest
// says the same of Gemini's).
func isAnthropic(r *http.Request) bool {
	return strings.HasPrefix(r.URL.Path, "/v1/messages") || r.Header.Get("anthropic-version") != ""
}

// WriteError writes an error the HTTP layer answers by status (a refused
// key, an unknown route, a body over its cap, a panic) in the request's
// protocol shape, named as apierr names the status's kind.
func WriteError(w http.ResponseWriter, r *http.Request, status int, message string) {
	p := apierr.ForStatus(status, message)
	writeProblem(w, r, &p)
}

func notFound(c *gin.Context) {
	WriteError(c.Writer, c.Request, http.StatusNotFound, "unknown route "+c.Request.Method+" "+c.Request.URL.Path)
}

func notAllowed(c *gin.Context) {
	WriteError(c.Writer, c.Request, http.StatusMethodNotAllowed, "method "+c.Request.Method+" not allowed on "+c.Request.URL.Path)
}

// NewAdmin returns the engine of an admin listener of its own, for
// admin.Register: request ids, recovery, the same authorization as the API
// listener; and when open is not nil (no admin token, so the listener is
// loopback-only), the browser guard while open says the gateway has no API
// key. pythonCompat adds the Python gateway's "detail" to error bodies.
func NewAdmin(cr *access.Credentials, adminErr AdminErrorFunc, log *slog.Logger, open func() bool, pythonCompat bool) *gin.Engine {
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	e.Use(RequestID(log))
	if pythonCompat {
		e.Use(PythonErrors())
	}
	e.Use(Recover(log))
	if open != nil {
		e.Use(BrowserGuard(false, open))
	}
	e.Use(Authorize(cr, adminErr))
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

// Recover turns a handler panic into a 500 in the caller's protocol (and a
// log line with the stack), never a dropped connection without an answer.
func Recover(log *slog.Logger) gin.HandlerFunc {
	return gin.CustomRecoveryWithWriter(nil, func(c *gin.Context, err any) {
		log.Error("handler panic", "request_id", httpx.RequestID(c.Request.Context()), "panic", err)
		if !c.Writer.Written() {
			WriteError(c.Writer, c.Request, http.StatusInternalServerError, "internal error")
		}
		c.Abort()
	})
}

// BodyCap limits request bodies in size, and in bytes held at once across
// the gateway: one announced larger than n is refused at once, and protocol
// decoders turn the overflow of one that was not into 413; one the budget
// has no room for gets 429 with Retry-After before it is read (a body of
// unknown length reserves its room as it arrives, and the reader fails
// when there is none). The room is given back when the request is over.
// How long a body may take is bounded before any middleware runs
// (httpx.Deadlines), and a refusal written before its body was read
// closes the connection there.
func BodyCap(n int64, budget *httpx.Budget) gin.HandlerFunc {
	return func(c *gin.Context) {
		r := c.Request
		if r.ContentLength > n {
			WriteError(c.Writer, r, http.StatusRequestEntityTooLarge, "request body exceeds "+formatBytes(n))
			c.Abort()
			return
		}
		r.Body = http.MaxBytesReader(c.Writer, r.Body, n)
		switch {
		case budget == nil || r.ContentLength == 0:
		case r.ContentLength > 0:
			if !budget.Take(r.ContentLength) {
				p := apierr.Classify(httpx.ErrBudget)
				writeProblem(c.Writer, r, &p)
				c.Abort()
				return
			}
			defer budget.Put(r.ContentLength)
		default:
			b := &budgetBody{Reader: httpx.Reader{R: r.Body, B: budget}, Closer: r.Body}
			r.Body = b
			defer func() { budget.Put(b.Taken) }()
		}
		c.Next()
	}
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
