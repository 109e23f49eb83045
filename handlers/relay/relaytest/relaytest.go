// Package relaytest serves a protocol's answer route in a test the way the
// HTTP edge runs it: the protocol's one look at the request (Accept), the
// body read once, decoded by the protocol, the answer opened from a
// scripted source (usually a chattest.Source) and encoded by the
// protocol's encoder through its relay; and its token count (Count). It
// never hops: the edge's tests check that.
package relaytest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/internal/tokens"
)

// Source answers requests as the pool would (*chattest.Source).
type Source interface {
	// Open runs req and returns its answer once it has started; mayHop is
	// always false here.
	Open(ctx context.Context, req *chat.Request, mayHop bool) (ans chat.Answer, holder string, err error)
}

// Serve returns p's answer route as a handler whose requests src answers,
// and the outcome of each through outcome (nil: dropped). A body that
// cannot be read is answered 400 in plain text: the edge answers that
// itself in the caller's protocol, and its tests check how.
func Serve(p relay.Protocol, src Source) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := httpx.ReadBody(r)
		if err != nil {
			http.Error(w, "relaytest: reading the body: "+err.Error(), http.StatusBadRequest)
			return
		}
		Run(w, r, p, body, src)
	}
}

// Count returns p's token count route as the edge serves it (relay.Count),
// with slots (nil: the edge's default).
func Count(p relay.Protocol, slots *httpx.Slots) http.HandlerFunc {
	if slots == nil {
		slots = httpx.NewSlots(0, 0)
	}
	return func(w http.ResponseWriter, r *http.Request) {
		p.Accept(r)
		body, err := httpx.ReadBody(r)
		if err != nil {
			p.Relay().Fail(r.Context(), w, err)
			return
		}
		relay.Count(w, r, p, p.(relay.Counter), body, slots, tokens.Count)
	}
}

// Run serves one request whose body was read, as Serve does, and returns
// how it ended.
func Run(w http.ResponseWriter, r *http.Request, p relay.Protocol, body []byte, src Source) relay.Outcome {
	rl := p.Relay()
	p.Accept(r)
	t, err := p.Decode(r, body)
	if err != nil {
		return rl.Fail(r.Context(), w, err)
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	var out relay.Outcome
	if t.Stream != nil {
		sse := rl.NewStream(w, t.ContentType)
		st := rl.Start(ctx, cancel, sse, t.Stream(sse))
		ans, _, err := src.Open(ctx, t.Request, false)
		out = st.Relay(ans, err)
	} else {
		ans, _, err := src.Open(ctx, t.Request, false)
		out = rl.Collect(ctx, w, ans, err, t.Body)
	}
	if t.Over != nil {
		t.Over(ctx, out)
	}
	return out
}

// Transcript serves one POST of body on path by h and returns what a golden
// file keeps of it (testenv.Transcript).
func Transcript(h http.HandlerFunc, path, body string) string {
	rec := httptest.NewRecorder()
	h(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
	return testenv.Transcript(rec)
}

// Golden checks a transcript against the golden file name (testenv.Golden),
// each match of volatile (the ids a protocol makes up) replaced by repl as
// regexp's ReplaceAllString does.
func Golden(t testing.TB, name, transcript string, volatile *regexp.Regexp, repl string) {
	t.Helper()
	testenv.Golden(t, name, []byte(volatile.ReplaceAllString(transcript, repl)))
}
