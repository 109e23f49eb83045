package handlers

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/poolgate/poolgate/handlers/apierr"
	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/handlers/relay"
	"github.com/poolgate/poolgate/internal/access"
	"github.com/poolgate/poolgate/internal/apikey"
	"github.com/poolgate/poolgate/internal/keylimits"
	"github.com/poolgate/poolgate/internal/live"
	"github.com/poolgate/poolgate/internal/metrics"
	"github.com/poolgate/poolgate/internal/requestlog"
	"github.com/poolgate/poolgate/internal/telemetry"
	"github.com/poolgate/poolgate/internal/usage"
	"github.com/poolgate/poolgate/pool/route"
)

// Accounting says who used what: each key's limits at admission, the usage
// counters, the request log and the per-key metrics. A nil field turns its
// part off; the recorders must not block (they queue for a batch writer).
type Accounting struct {
	Limiter keylimits.Limiter
	Usage   func(usage.Record)
	Log     func(requestlog.Entry)
	// Capture keeps each request's prompt and answer for the request log
	// (a debug switch).
	Capture bool

	// Live keeps the last hour's traffic for the dashboard (nil: none).
	Live *live.Recorder

	tracer telemetry.Tracer // New sets it from Config.Tracing
}

// record is one request's record once it is over.
type record struct {
	route.Served
	// Error is the error told to the caller, "" when none.
	Error string
	// Forwarded says another replica served the request.
	Forwarded bool
}

// observe serves an answer API's route with its protocol: admission under
// the caller's key's limits, the body read once, the turn run by the edge
// (answer), then the request's record once it is over (metrics, usage, the
// request log). A request another replica forwarded
// here was admitted there, so only its record is kept here; a request this
// replica forwarded is recorded by the replica that served it.
func (s *server) observe(p relay.Protocol) gin.HandlerFunc {
	m, acct, log, e := s.m, s.acct, s.log, s.edge
	api := p.Relay().Name()
	var series *metrics.API // the API's own series, looked up once
	if m != nil {
		series = m.ForAPI(api)
	}
	return func(c *gin.Context) {
		start := time.Now()
		ctx := c.Request.Context()
		key := access.From(ctx).Key
		ticket, denied := s.admit(c, key)
		if denied != nil {
			finish(m, series, acct, api, c, key, record{Error: denied.Error()}, start)
			return
		}
		var rec record
		if body, err := httpx.ReadBody(c.Request); err != nil {
			rec.Error = s.readFailed(c.Writer, c.Request, err)
		} else {
			out, served := e.answer(c.Writer, c.Request, api, p, body)
			rec = record{Served: served, Error: out.Told, Forwarded: out.Forwarded}
		}
		finish(m, series, acct, api, c, key, rec, start)
		tokens := int64(rec.Usage.InputTokens + rec.Usage.OutputTokens)
		ticket.Done(tokens)
		if ticket == nil && key != nil && key.TokensPerDay > 0 && acct.Limiter != nil && Forwarded(c.Request) {
			// Admitted by the replica that forwarded it; its tokens are
			// known only here.
			if err := acct.Limiter.Charge(context.WithoutCancel(ctx), key.Name, tokens); err != nil {
				log.Warn("key quota not charged", "key", key.Name, "tokens", tokens, "err", err)
			}
		}
	}
}

// readFailed answers a body that could not be read (over its cap, late, over
// the gateway's body budget, or cut off) in the request's protocol shape
// and returns what it told.
func (s *server) readFailed(w http.ResponseWriter, r *http.Request, err error) string {
	if apierr.Gone(r.Context(), err) {
		w.WriteHeader(apierr.StatusClientClosed)
		return relay.ClientGone
	}
	if !errors.Is(err, httpx.ErrBodyTooLarge) && !errors.Is(err, httpx.ErrBodyTimeout) && !errors.Is(err, httpx.ErrBudget) &&
		!errors.Is(err, httpx.ErrTooDeep) {
		err = &apierr.RequestError{Message: "could not read the request body: " + err.Error()}
	}
	p := apierr.Classify(err)
	s.t.writeProblem(w, r, &p)
	return p.Message
}

// limited admits a request that costs the gateway work but serves no turn
// (counting tokens) under the caller's key's limits: it takes a request of
// the key's rate and a slot of its concurrency, and is refused once the
// key's daily tokens are spent, but charges no tokens.
func (s *server) limited(h http.HandlerFunc) gin.HandlerFunc {
	return func(c *gin.Context) {
		ticket, denied := s.admit(c, access.From(c.Request.Context()).Key)
		if denied != nil {
			return
		}
		defer ticket.Done(0)
		h(c.Writer, c.Request)
	}
}

// admit takes the request under its key's limits; a refusal is answered
// here (429 in the caller's protocol) and returned. A request another
// replica forwarded was admitted there. An error other than a denial
// admits the request: a limiter that cannot decide must not stop the
// gateway (the Redis limiter decides alone while Redis is away).
func (s *server) admit(c *gin.Context, key *apikey.Key) (*keylimits.Ticket, *keylimits.Denied) {
	m, acct, log := s.m, s.acct, s.log
	if key == nil || !key.Limited() || acct.Limiter == nil || Forwarded(c.Request) {
		return nil, nil
	}
	lctx, span := acct.tracer.Start(c.Request.Context(), telemetry.SpanKeyLimits)
	t, err := acct.Limiter.Acquire(lctx, key.Name, keylimits.Limits{RPM: key.RPM,
		Concurrency: key.Concurrency, TokensPerDay: key.TokensPerDay})
	endLimitSpan(span, key.Name, err)
	var denied *keylimits.Denied
	switch {
	case errors.As(err, &denied):
		s.writeDenied(c.Writer, c.Request, denied)
		if m != nil {
			m.KeyLimited.WithLabelValues(key.Name, denied.Limit).Inc()
		}
		return nil, denied
	case err != nil:
		log.Warn("key limits unavailable, admitting", "key", key.Name, "err", err)
		return nil, nil
	}
	return t, nil
}

// finish records a request that is over and returns its record.
func finish(m *metrics.Metrics, series *metrics.API, acct *Accounting, api string, c *gin.Context, key *apikey.Key,
	info record, start time.Time) {
	status := c.Writer.Status()
	code := "200"
	if status != http.StatusOK {
		code = itoa(status)
	}
	elapsed := time.Since(start)
	name := ""
	if key != nil {
		name = key.Name
	}
	if m != nil {
		if status == http.StatusOK {
			series.OK.Inc()
		} else {
			m.Requests.WithLabelValues(api, code).Inc()
		}
		series.Duration.Observe(elapsed.Seconds())
		if name != "" {
			m.KeyRequests.WithLabelValues(name, code).Inc()
			if u := info.Usage; u.InputTokens+u.OutputTokens > 0 {
				m.KeyTokens.WithLabelValues(name, "input").Add(float64(u.InputTokens))
				m.KeyTokens.WithLabelValues(name, "output").Add(float64(u.OutputTokens))
			}
		}
	}
	if info.Forwarded {
		return // the replica that served it keeps its record
	}
	failed := status >= 400 || info.Error != ""
	if acct.Live != nil {
		acct.Live.Observe(start.Add(elapsed), info.Account, live.Outcome(status, info.Error != ""), elapsed, info.TTFT)
		if info.FollowUp && !failed && info.Account != "" {
			acct.Live.FollowUp(start.Add(elapsed), info.Account, info.Reused)
		}
	}
	if acct.Usage != nil {
		acct.Usage(usage.Record{Time: start, Key: name, Account: info.Account, InputTokens: int64(info.Usage.InputTokens),
			OutputTokens: int64(info.Usage.OutputTokens), Error: failed, Reused: info.Reused})
	}
	if acct.Log != nil {
		acct.Log(requestlog.Entry{Time: start, RequestID: httpx.RequestID(c.Request.Context()),
			TraceID: telemetry.TraceID(c.Request.Context()), Key: name,
			Account: info.Account, Instance: info.Instance, Model: info.Model, Conversation: info.Conversation,
			Protocol: api, Status: status,
			LatencyMS: elapsed.Milliseconds(), InputTokens: int64(info.Usage.InputTokens),
			OutputTokens: int64(info.Usage.OutputTokens), Reused: info.Reused, Error: info.Error,
			Prompt: info.Prompt, Answer: info.Answer})
	}
}

// writeDenied answers a request over its key's limit: 429 in the caller's
// protocol, naming the limit, with Retry-After.
func (s *server) writeDenied(w http.ResponseWriter, r *http.Request, d *keylimits.Denied) {
	p := apierr.Problem{Class: apierr.RateLimited, Status: http.StatusTooManyRequests, Code: "rate_limit_exceeded",
		Message: d.Error(), RetryAfter: d.RetryAfter, Err: d}
	if d.Limit == keylimits.LimitTokensPerDay {
		p.Code = "insufficient_quota"
	}
	w.Header().Set(LimitHeader, d.Limit)
	s.t.writeProblem(w, r, &p)
}

// LimitHeader names the key limit that refused a request.
const LimitHeader = "X-Poolgate-Limit"
