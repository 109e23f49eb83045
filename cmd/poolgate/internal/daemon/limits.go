package daemon

import (
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
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

// ownerKey keys the digests of the callers' API keys that name their
// conversations and stored Responses in the store (access.Owners): derived
// from the cluster token, which every replica shares and no client knows,
// else a key of this node's own, kept in its data dir so that a restart
// still finds the entries it stored.
func ownerKey(cfg config.Config, log *slog.Logger) ([]byte, error) {
	if cfg.ClusterToken != "" {
		return hkdf.Key(sha256.New, []byte(cfg.ClusterToken), nil, "poolgate owner digests v1", 32)
	}
	path := filepath.Join(cfg.DataDir, "owner.key")
	if key, err := os.ReadFile(path); err == nil && len(key) == 32 {
		return key, nil
	} else if err == nil {
		return nil, fmt.Errorf("%s is not a key of 32 bytes: remove it, and poolgate makes a new one (stored Responses and affinity entries named under the old one are then not found)", path)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return ownerKey(cfg, log) // made by another process a moment ago
	}
	if err != nil {
		return nil, fmt.Errorf("keep the owner key: %w", err)
	}
	_, err = f.Write(key)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("keep the owner key: %w", err)
	}
	log.Info("made the key of the digests that name API keys' entries in the store", "file", path)
	return key, nil
}
