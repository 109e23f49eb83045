// Package relaytest serves a protocol's answer route in a test the way the
// HTTP edge calls it: the body read once, and a relay.Pool (usually a
// chattest.Pool) as the way to the answer.
package relaytest

import (
	"net/http"

	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/handlers/relay"
)

// Route is a protocol's answer route (openaichat's Completions, responses'
// Create, anthropic's Messages).
type Route func(w http.ResponseWriter, r *http.Request, c relay.Call) relay.Outcome

// Serve returns route as a handler whose requests p answers. A body that
// cannot be read is answered 400 in plain text: the edge answers that
// itself in the caller's protocol, and its tests check how.
func Serve(route Route, p relay.Pool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := httpx.ReadBody(r)
		if err != nil {
			http.Error(w, "relaytest: reading the body: "+err.Error(), http.StatusBadRequest)
			return
		}
		route(w, r, relay.Call{Body: body, Pool: p})
	}
}
