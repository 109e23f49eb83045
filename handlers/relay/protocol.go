package relay

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/internal/chat"
)

// Protocol is an answer API as the edge runs it: a codec between HTTP and
// the neutral chat types, and everything the edge needs to know of it, so
// that the edge names no protocol. It claims its requests, reads the key
// its clients send, turns a request into a Decoded (the chat.Request and
// the encoder of its answer) and writes its errors (its Relay's
// WriteProblem); Counter and Lister add a token count and a model listing
// in its shape. It knows nothing of the pool, the router or the cluster:
// the edge opens the answer and hands it to the protocol's Relay with the
// Decoded's encoder.
type Protocol interface {
	// Relay is the protocol's relay: its name in logs, metrics and the
	// request log, the fields its decoder may drop, its keep-alive and
	// the writer of its JSON error body.
	Relay() *Relay
	// Endpoints are the protocol's HTTP routes, which the edge registers.
	// Several protocols may declare one path (the model listing): the one
	// that claims a request serves it, else the first in the table.
	Endpoints() []Endpoint
	// Claims reports whether r speaks this protocol (one of its paths, a
	// header only its clients send), without changing r. The edge asks
	// the protocols in the table's order: the first that claims a request
	// answers what the edge answers itself (a key refused, an unknown
	// route, a body over its cap) in its shape, and the table's first
	// answers a request none claims.
	Claims(r *http.Request) bool
	// Accept is the protocol's one look at a request it is to serve,
	// before the request is authorized: it moves a key its clients send
	// where no other protocol's do into Authorization, where the edge
	// reads every caller's key, may note what the path names in r's path
	// values (for Decode), and says how the edge serves the request
	// (AsEndpoint: as its endpoint says). A request another replica
	// forwarded (access.HopHeader) is checked against its signature as it
	// arrived: Accept moves nothing in it.
	Accept(r *http.Request) Serving
	// Decode turns r, whose body was read once, into the turn to run. An
	// error is the caller's (a bad request, an unknown previous response)
	// and is answered through Relay().Fail.
	Decode(r *http.Request, body []byte) (*Decoded, error)
}

// Counter is a Protocol that counts a request's prompt tokens (an
// endpoint that ServeCount): it decodes the request and writes the count
// in its shape; the edge counts, the same way for every protocol (Count).
type Counter interface {
	// DecodeCount decodes a count request, whose body was read once, into
	// the request whose prompt is counted, validated as its turn would be.
	DecodeCount(r *http.Request, body []byte) (*chat.Request, error)
	// WriteCount answers a count of n prompt tokens.
	WriteCount(w http.ResponseWriter, n int)
}

// Lister is a Protocol that lists the pool's models in its shape (an
// endpoint that ServeModels).
type Lister interface {
	// WriteModels answers r with ms, the pool's models: all of them, or,
	// when r's path value "name" names one, that model or a 404 in the
	// protocol's shape.
	WriteModels(w http.ResponseWriter, r *http.Request, ms []chat.Model)
}

// Decoded is one decoded request: the neutral request and how its answer is
// encoded, as a stream (Stream) or as one JSON body (Body).
type Decoded struct {
	Request *chat.Request
	// Stream, when set, streams the answer: it returns the encoder that
	// writes on s. Nil: Body encodes the whole answer.
	Stream func(s *SSE) Encoder
	// ContentType is a stream's when the protocol frames it itself
	// (SSE.Raw); "" for server-sent events.
	ContentType string
	// Body encodes a whole answer when Stream is nil.
	Body BodyEncoder
	// Over, when set, is told how the answer ended once it is over (a
	// hop's included): Responses stores its response there.
	Over func(ctx context.Context, out Outcome)
}

// Serving says how the edge serves a request on an endpoint.
type Serving uint8

// How the edge serves an endpoint's requests.
const (
	// AsEndpoint, from Accept, serves a request as its endpoint says.
	AsEndpoint Serving = iota
	// ServeTurn runs a turn: the request is decoded by the protocol's
	// Decode, its answer opened by the edge and encoded through the relay,
	// and it is admitted and accounted under the caller's key.
	ServeTurn
	// ServeCount counts the request's prompt tokens (Counter), admitted
	// under the caller's key's limits: it costs the gateway work but
	// charges no tokens.
	ServeCount
	// ServeModels lists the pool's models (Lister).
	ServeModels
	// ServePlain is served by the endpoint's Serve as it is (a stored
	// response).
	ServePlain
	// ServeNone is no route: the edge answers 404 in the caller's shape.
	ServeNone
)

// Endpoint is one of a protocol's HTTP routes, as the edge registers it.
type Endpoint struct {
	// Method and Path say what the route serves. Path is in gin's pattern
	// syntax (":id" one segment, "*rest" the rest); the handler reads its
	// parameters as r.PathValue.
	Method, Path string
	// Serves says how the edge serves the endpoint's requests, unless the
	// protocol's Accept says otherwise (Gemini's models/{model}:{method}
	// share one path).
	Serves Serving
	// Serve serves the endpoint's requests of ServePlain.
	Serve http.HandlerFunc
}

// Options are the settings every protocol takes; each protocol's Config
// embeds them.
type Options struct {
	// KeepAlive is how long a stream may stay quiet (or an answer take to
	// start) before a keep-alive goes out; the first one opens the stream, so
	// a failure after it is told in-stream. Default 15s; negative disables.
	KeepAlive time.Duration
	// WriteTimeout bounds each write and flush of a stream, so a client
	// that stops reading cannot hold the worker. Default 30s.
	WriteTimeout time.Duration
	// CountDropped counts request fields that were accepted but dropped
	// (nil: not counted).
	CountDropped httpx.FieldCounter
	// Status, when set, gives the status a problem of this code is
	// answered with instead of status: another gateway's, which its clients
	// act on (internal/pycompat's). Nil: apierr's.
	Status func(code string, status int) int
}

// Codec is what every protocol's handler has in common: its relay and its
// log. A handler embeds it, which gives it Relay and the usual Accept (a
// protocol whose clients need more, as Gemini's do, has its own).
type Codec struct {
	relay *Relay
	// Log is the protocol's logger (never nil).
	Log *slog.Logger
}

// NewCodec returns the codec of the protocol cfg names. A nil log discards.
func NewCodec(cfg Config, log *slog.Logger) Codec {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return Codec{relay: New(cfg, log), Log: log}
}

// Relay is the protocol's relay (Protocol).
func (c Codec) Relay() *Relay { return c.relay }

// Accept serves a request as its endpoint says (Protocol).
func (c Codec) Accept(*http.Request) Serving { return AsEndpoint }

// Report counts and logs the fields a decoder dropped from one request.
func (c Codec) Report(ctx context.Context, d *httpx.Dropped) {
	d.Report(ctx, c.Log, c.relay.cfg.CountDropped, c.relay.cfg.Protocol)
}

// Count serves a token count of the protocol p, whose Counter is c, once
// its body was read: decoded by the protocol, its prompt counted with
// count (chat.PromptTokens with the gateway's tokenizer, as the router
// counts a turn's usage, so that a count and the usage of the same request
// agree), written in the protocol's shape. A count takes no worker slot,
// so it waits for one of slots, and is refused with a 429 when none frees
// in time.
func Count(w http.ResponseWriter, r *http.Request, p Protocol, c Counter, body []byte, slots *httpx.Slots, count func(string) int) {
	rl := p.Relay()
	if !slots.Take(r.Context()) {
		rl.Fail(r.Context(), w, &chat.OverloadedError{RetryAfter: time.Second})
		return
	}
	defer slots.Release()
	req, err := c.DecodeCount(r, body)
	if err != nil {
		rl.Fail(r.Context(), w, err)
		return
	}
	c.WriteCount(w, chat.PromptTokens(req.Messages, count))
}

// WriteProblem writes p as the protocol's JSON error body, with its
// status (Options.Status's, when it has one for p).
func (rl *Relay) WriteProblem(w http.ResponseWriter, p *apierr.Problem) {
	if f := rl.cfg.Status; f != nil {
		if s := f(p.Code, p.Status); s != p.Status {
			p.Class, p.Status = apierr.ForStatus(s, "").Class, s
		}
	}
	rl.cfg.WriteError(w, p)
}

// DroppedFields are the fields the protocol's decoder may drop, for the
// metrics' series.
func (rl *Relay) DroppedFields() []string { return rl.cfg.Dropped }
