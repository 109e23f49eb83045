package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/poolgate/poolgate/handlers"
	"github.com/poolgate/poolgate/internal/apikey"
	"github.com/poolgate/poolgate/internal/batch"
	"github.com/poolgate/poolgate/internal/config"
	"github.com/poolgate/poolgate/internal/keylimits"
	"github.com/poolgate/poolgate/internal/live"
	"github.com/poolgate/poolgate/internal/metrics"
	"github.com/poolgate/poolgate/internal/requestlog"
	"github.com/poolgate/poolgate/internal/usage"
)

// keysOf is the configured API keys as the HTTP layer holds them.
func keysOf(cfg config.Config) []apikey.Key {
	out := make([]apikey.Key, len(cfg.APIKeys))
	for i, k := range cfg.APIKeys {
		out[i] = apikey.Key{Name: k.Name, Secret: k.Key, Role: k.Role, RPM: k.RPM, Concurrency: k.Concurrency,
			TokensPerDay: k.TokensPerDay}
	}
	return out
}

// accounting is who used what: the key limits, the usage counters and the
// request log, on Redis when the daemon has one (every replica sees and
// enforces the same numbers) and in memory otherwise. Usage and log entries
// are written in batches off the request path.
type accounting struct {
	limiter  keylimits.Limiter
	usage    usage.Store
	requests requestlog.Log
	usageW   *batch.Writer[usage.Record]
	logW     *batch.Writer[requestlog.Entry]
	wait     func() // waits for the limiter's renewals to end
}

func newAccounting(cfg config.Config, rdb redis.UniversalClient, m *metrics.Metrics, log *slog.Logger) *accounting {
	retention := time.Duration(cfg.UsageRetentionDays) * 24 * time.Hour
	lcfg := requestlog.Config{MaxEntries: cfg.RequestLogSize, MaxBytes: cfg.RequestLogBytes, Debug: cfg.RequestLogDebug}
	a := &accounting{wait: func() {}}
	if rdb == nil {
		a.limiter = keylimits.NewMemory(time.Now)
		a.usage = usage.NewMemory(retention, time.Now)
		a.requests = requestlog.NewMemory(lcfg)
	} else {
		onError := func(op string, err error) {
			m.StoreErrors.WithLabelValues("key_limits").Inc()
			log.Debug("key limits store", "op", op, "err", err)
		}
		rl := keylimits.NewRedis(rdb, keylimits.RedisConfig{Prefix: cfg.RedisPrefix, OnError: onError})
		a.limiter, a.wait = rl, rl.Wait
		a.usage = usage.NewRedis(rdb, usage.RedisConfig{Prefix: cfg.RedisPrefix, Retention: retention})
		a.requests = requestlog.NewRedis(rdb, cfg.RedisPrefix, lcfg)
	}
	failed := func(op string) func(error, int) {
		return func(err error, n int) {
			m.StoreErrors.WithLabelValues(op).Inc()
			log.Warn("accounting write failed", "op", op, "records", n, "err", err)
		}
	}
	a.usageW = batch.New(batch.Config{OnError: failed("record_usage")}, a.usage.Add)
	a.logW = batch.New(batch.Config{OnError: failed("log_request")}, a.requests.Add)
	return a
}

// forHTTP is the HTTP layer's view.
func (a *accounting) forHTTP(capture bool, rec *live.Recorder) *handlers.Accounting {
	return &handlers.Accounting{Limiter: a.limiter, Capture: capture, Live: rec,
		Usage: func(r usage.Record) { a.usageW.Add(r) },
		Log:   func(e requestlog.Entry) { a.logW.Add(e) }}
}

// scrub removes the prompts and answers an earlier run kept in the
// request log while request_log_debug was on: captures last only as long as
// the setting. A store it can't reach keeps them until the next start, and
// says so.
func (a *accounting) scrub(ctx context.Context, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := a.requests.Scrub(ctx)
	switch {
	case err != nil:
		log.Warn("request log: prompts captured while request_log_debug was on could not be scrubbed; the next start tries again", "err", err)
	case n > 0:
		log.Info("request log: scrubbed the prompts and answers captured while request_log_debug was on", "entries", n)
	}
}

// close flushes what waits to be written.
func (a *accounting) close() {
	a.usageW.Close()
	a.logW.Close()
	a.wait()
}
