package relay

import (
	"context"
	"net/http"

	"github.com/poolgate/poolgate/internal/chat"
)

// Protocol is an answer API as the edge runs it: a codec between HTTP and
// the neutral chat types. It turns a request into a Decoded (the chat.Request
// and the encoder of its answer) and knows nothing of the pool, the
// router or the cluster: the edge opens the answer and hands it to the
// protocol's Relay with the Decoded's encoder.
type Protocol interface {
	// Decode turns r, whose body was read once, into the turn to run. An
	// error is the caller's (a bad request, an unknown previous response)
	// and is answered through Relay().Fail.
	Decode(r *http.Request, body []byte) (*Decoded, error)
	// Relay is the protocol's relay: its name in logs, metrics and the
	// request log, its keep-alive and the writer of its JSON error body.
	Relay() *Relay
	// Endpoints are the protocol's HTTP routes, which the edge registers.
	Endpoints() []Endpoint
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

// Serving says how the edge serves a request on a route.
type Serving uint8

// How the edge serves a route's requests.
const (
	// ServeTurn runs a turn: the request is decoded by the protocol's
	// Decode, its answer opened by the edge and encoded through the relay,
	// and it is admitted and accounted under the caller's key.
	ServeTurn Serving = iota
	// ServeCount is served by Serve, admitted under the caller's key's
	// limits: it costs the gateway work (counting tokens) but charges no
	// tokens.
	ServeCount
	// ServePlain is served by Serve as it is (a stored response).
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
	Serves       Serving
	// Serve serves the route's requests of ServeCount and ServePlain.
	Serve http.HandlerFunc
	// Pick, when set, picks the serving per request, for methods that share
	// one path (Gemini's models/{model}:{method}).
	Pick func(r *http.Request) Serving
}
