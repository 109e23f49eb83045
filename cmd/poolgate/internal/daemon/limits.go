package daemon

import (
	"log/slog"
	"syscall"

	"github.com/poolgate/poolgate/handlers/httpx"
	"github.com/poolgate/poolgate/internal/config"
	"github.com/poolgate/poolgate/internal/metrics"
	"github.com/poolgate/poolgate/internal/sysmem"
)

// newBodyBudget is the budget of API request bodies held at once: the
// configured figure, else an eighth of the memory this process may use,
// and at least four bodies of the largest size; one key holds at most its
// configured share, else half of it, and at least one body of the largest
// size.
func newBodyBudget(cfg config.Config, m *metrics.Metrics, log *slog.Logger) *httpx.Budget {
	budget := cfg.BodyBudgetBytes
	if budget <= 0 {
		mem, from := sysmem.Limit()
		budget = max(mem/8, 4*cfg.MaxBodyBytes)
		if mem == 0 {
			from = "unknown: 16 bodies of max_body_bytes"
			budget = 16 * cfg.MaxBodyBytes
		}
		log.Info("request body budget", "bytes", budget, "memory", mem, "from", from)
	}
	perKey := cfg.BodyBudgetPerKey
	if perKey <= 0 {
		perKey = max(budget/2, cfg.MaxBodyBytes)
	}
	return httpx.NewBudget(budget, perKey, m.BodyBytes.Set, m.Rejections.Inc)
}

// newConns bounds the client connections of both listeners: in all, below
// the open-file limit (which the Go runtime raised to its hard limit at
// start), so that the workers, Redis, the store's files and a new client
// always find a descriptor; per API key, half of that unless configured;
// and in connections without a credential, per listener.
func newConns(cfg config.Config, m *metrics.Metrics, log *slog.Logger) *httpx.Conns {
	total, perKey := cfg.MaxConns, cfg.MaxConnsPerKey
	var lim syscall.Rlimit
	nofile := 0
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < 1<<30 {
		nofile = int(lim.Cur)
	}
	if total <= 0 && nofile > 0 {
		total = connsFor(nofile)
	}
	if perKey <= 0 {
		perKey = total / 2
	}
	log.Info("client connections", "max", total, "per_key", perKey, "unauthenticated_per_listener",
		cfg.MaxUnauthenticatedConns, "open_file_limit", nofile, "write_timeout", cfg.WriteTimeout)
	return httpx.NewConns(httpx.ConnConfig{Max: total, MaxPerKey: perKey, MaxUnauthenticated: cfg.MaxUnauthenticatedConns,
		WriteTimeout: cfg.WriteTimeout}, httpx.ConnMetrics{Evicted: m.ConnsEvicted.Inc, Refused: m.ConnsRefused.Inc,
		Open: m.ConnsOpen.Set})
}

// connsFor is the client connections an open-file limit of nofile leaves:
// the limit less a quarter of it (at least 128 descriptors kept for the
// rest of the process), and never less than half of it.
func connsFor(nofile int) int {
	return max(nofile/2, nofile-max(128, nofile/4))
}
