package daemon

import (
	"context"
	"log/slog"
	"time"

	"github.com/poolgate/poolgate/handlers"
	"github.com/poolgate/poolgate/internal/apikey"
	"github.com/poolgate/poolgate/internal/batch"
	"github.com/poolgate/poolgate/internal/config"
	"github.com/poolgate/poolgate/internal/keylimits"
	"github.com/poolgate/poolgate/internal/live"
	"github.com/poolgate/poolgate/internal/metrics"
	"github.com/poolgate/poolgate/internal/redisconn"
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
// are written in batches off the request path; on Redis, what fails to be
// written (a failover, an outage) is held and written again once Redis
// answers, and the key limits hold the tokens they could not charge.
type accounting struct {
	limiter  keylimits.Limiter
	usage    usage.Store
	requests requestlog.Log
	usageW   *batch.Writer[usage.Record]
	logW     *batch.Writer[requestlog.Entry]
	held     *keylimits.Redis // the limiter on Redis, nil in memory
	log      *slog.Logger
}

// newAccounting builds the stores, on conn (the session store's Redis
// connection, whose health they share) or in memory when conn is nil.
func newAccounting(cfg config.Config, conn *redisconn.Conn, m *metrics.Metrics, log *slog.Logger) *accounting {
	retention := time.Duration(cfg.UsageRetentionDays) * 24 * time.Hour
	lcfg := requestlog.Config{MaxEntries: cfg.RequestLogSize, MaxBytes: cfg.RequestLogBytes, Debug: cfg.RequestLogDebug}
	a := &accounting{log: log}
	if conn == nil {
		a.limiter = keylimits.NewMemory(time.Now)
		a.usage = usage.NewMemory(retention, time.Now)
		a.requests = requestlog.NewMemory(lcfg)
	} else {
		onError := func(op string, err error) {
			m.StoreErrors.WithLabelValues("key_limits").Inc()
			log.Debug("key limits store", "op", op, "err", err)
		}
		a.held = keylimits.NewRedis(conn, keylimits.RedisConfig{OnError: onError, OnHeld: heldLog(m, log, "key_limits")})
		a.limiter = a.held
		a.usage = usage.NewRedis(conn, usage.RedisConfig{Retention: retention})
		a.requests = requestlog.NewRedis(conn, lcfg)
	}
	// The request log keeps its newest entries only: holding more than it
	// keeps would only hold what it trims.
	a.usageW = batch.New(writerConfig(m, log, "usage", 0), a.usage.Add)
	a.logW = batch.New(writerConfig(m, log, "request_log", lcfg.Kept()), a.requests.Add)
	return a
}

// writerConfig is a batch writer's: what it holds and drops counted under
// store, an outage logged once when it begins and once when it is over.
func writerConfig(m *metrics.Metrics, log *slog.Logger, store string, hold int) batch.Config {
	held, dropped := m.AccountingHeld.WithLabelValues(store), m.AccountingDropped.WithLabelValues(store)
	return batch.Config{Hold: hold,
		OnHeld: func(n int) { held.Set(float64(n)) },
		OnDrop: func(n int) { dropped.Add(float64(n)) },
		OnOutage: func(err error) {
			log.Warn("accounting records could not be written to redis; they are held and written again once it answers",
				"store", store, "err", err)
		},
		OnRecover: func(late, lost int) {
			log.Info("accounting records written to redis after the outage", "store", store, "records", late, "dropped", lost)
		},
	}
}

// heldLog counts what the key limits hold and logs when they begin and
// end holding anything.
func heldLog(m *metrics.Metrics, log *slog.Logger, store string) func(int) {
	g := m.AccountingHeld.WithLabelValues(store)
	var last int
	return func(n int) { // called under the limiter's lock: in order
		g.Set(float64(n))
		switch {
		case last == 0 && n > 0:
			log.Warn("key limit charges could not be written to redis; they are held and written again once it answers")
		case last > 0 && n == 0:
			log.Info("key limit charges written to redis after the outage")
		}
		last = n
	}
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

// run writes the key limits' held charges again every second until ctx
// ends.
func (a *accounting) run(ctx context.Context) {
	if a.held != nil {
		a.held.Run(ctx, time.Second)
	}
}

// close writes what waits, and says what it could not.
func (a *accounting) close() {
	lost := a.usageW.Close() + a.logW.Close()
	if a.held != nil {
		a.held.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		a.held.Flush(ctx)
		cancel()
		lost += a.held.Held()
	}
	if lost > 0 {
		a.log.Warn("accounting records lost at shutdown: redis did not take them", "records", lost)
	}
}
