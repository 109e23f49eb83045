// Package requestlog keeps the last requests the gateway served: when, whose
// key, which account and model, the protocol, the status, the latency, the
// tokens, whether the upstream session was reused, and the error if any.
// The prompt and the answer are kept only when the operator asks for them
// (a debug switch), cut to a few KiB each.
//
// The log is bounded in entries and in bytes: each entry is cut to at most
// EntryBytes when stored, and only MaxBytes/EntryBytes entries (at most
// MaxEntries) are kept, newest first. It lives in Redis when there is one,
// so every replica writes to and reads the same log, and in memory
// otherwise.
package requestlog

import (
	"context"
	"encoding/json"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

// Entry is one served request.
type Entry struct {
	Time      time.Time `json:"time"`
	RequestID string    `json:"request_id"`
	// TraceID is the request's trace when it was traced.
	TraceID      string `json:"trace_id,omitempty"`
	Key          string `json:"key"`
	Account      string `json:"account"`
	Instance     string `json:"instance"`
	Model        string `json:"model"`
	Protocol     string `json:"protocol"`
	Status       int    `json:"status"`
	LatencyMS    int64  `json:"latency_ms"`
	InputTokens  int64  `json:"input_tokens"`
	OutputTokens int64  `json:"output_tokens"`
	Reused       bool   `json:"reused"`
	Error        string `json:"error,omitempty"`
	// Prompt and Answer are set only with the debug switch on.
	Prompt string `json:"prompt,omitempty"`
	Answer string `json:"answer,omitempty"`
}

// Filter selects entries; zero fields select all.
type Filter struct {
	Key, Account string
	// Status is an exact status, or 0; Class a class (4 for 4xx), or 0;
	// Errors selects statuses >= 400 and answers that failed mid-stream.
	Status int
	Class  int
	Errors bool
	// Limit caps the answer (default and maximum: everything kept).
	Limit int
}

func (f Filter) matches(e *Entry) bool {
	return (f.Key == "" || f.Key == e.Key) && (f.Account == "" || f.Account == e.Account) &&
		(f.Status == 0 || f.Status == e.Status) && (f.Class == 0 || e.Status/100 == f.Class) &&
		(!f.Errors || e.Status >= 400 || e.Error != "")
}

// Config bounds a log. Zero values take the defaults.
type Config struct {
	// MaxEntries is how many entries are kept at most. Default 1000.
	MaxEntries int
	// MaxBytes caps what the kept entries take. Default 4 MiB.
	MaxBytes int
	// Debug keeps prompts and answers (cut to FieldBytes each).
	Debug bool
}

// Sizes of what one entry may hold.
const (
	// ErrorBytes caps an entry's error text.
	ErrorBytes = 1024
	// FieldBytes caps the prompt and the answer (debug only).
	FieldBytes = 8 << 10
	// baseBytes bounds the encoding of an entry's other fields (names are
	// short; the longest free text is the error).
	baseBytes = 2 << 10
)

func (c Config) withDefaults() Config {
	if c.MaxEntries <= 0 {
		c.MaxEntries = 1000
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = 4 << 20
	}
	return c
}

// EntryBytes is the most one stored entry takes.
func (c Config) EntryBytes() int {
	if c.Debug {
		return baseBytes + 2*FieldBytes*2 // JSON escaping may double a field
	}
	return baseBytes
}

// Kept is how many entries c keeps.
func (c Config) Kept() int {
	c = c.withDefaults()
	return max(1, min(c.MaxEntries, c.MaxBytes/c.EntryBytes()))
}

// prepare cuts an entry to its bounds.
func (c Config) prepare(e Entry) Entry {
	e.Error = cut(e.Error, ErrorBytes)
	if c.Debug {
		e.Prompt, e.Answer = cut(e.Prompt, FieldBytes), cut(e.Answer, FieldBytes)
	} else {
		e.Prompt, e.Answer = "", ""
	}
	for _, s := range []*string{&e.RequestID, &e.Key, &e.Account, &e.Instance, &e.Model, &e.Protocol} {
		*s = cut(*s, 128)
	}
	return e
}

// cut shortens s to at most n bytes on a rune boundary.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// Log keeps the entries.
type Log interface {
	// Add stores a batch of entries (oldest first).
	Add(ctx context.Context, es []Entry) error
	// List returns the matching entries, newest first.
	List(ctx context.Context, f Filter) ([]Entry, error)
	// Scrub removes every prompt and answer the log keeps (captured while
	// the debug switch was on) and reports how many entries held one.
	Scrub(ctx context.Context) (int, error)
}

// Memory is the Log of a single replica without Redis.
type Memory struct {
	cfg  Config
	keep int // Config.Kept
	mu   sync.Mutex
	// ring holds up to keep entries, oldest first until it is full; from
	// then on each entry overwrites the oldest, at next.
	ring []Entry
	next int
}

// NewMemory returns an in-memory log.
func NewMemory(cfg Config) *Memory {
	cfg = cfg.withDefaults()
	return &Memory{cfg: cfg, keep: cfg.Kept()}
}

// Add implements Log.
func (m *Memory) Add(_ context.Context, es []Entry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range es {
		e = m.cfg.prepare(e)
		if len(m.ring) < m.keep {
			m.ring = append(m.ring, e)
			continue
		}
		m.ring[m.next] = e
		m.next = (m.next + 1) % m.keep
	}
	return nil
}

// List implements Log.
func (m *Memory) List(_ context.Context, f Filter) ([]Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Entry
	n := len(m.ring)
	for k := 0; k < n && (f.Limit <= 0 || len(out) < f.Limit); k++ {
		e := &m.ring[(m.next-1-k+n)%n] // newest first
		if f.matches(e) {
			out = append(out, *e)
		}
	}
	return out, nil
}

// Scrub implements Log.
func (m *Memory) Scrub(context.Context) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for i := range m.ring {
		if e := &m.ring[i]; e.Prompt != "" || e.Answer != "" {
			e.Prompt, e.Answer = "", ""
			n++
		}
	}
	return n, nil
}

// Redis is the Log every replica shares: a list "<prefix>requests", newest
// first, trimmed to Config.Kept entries on every write.
type Redis struct {
	rdb     redis.UniversalClient
	key     string
	cfg     Config
	timeout time.Duration
}

// NewRedis returns a log on rdb under prefix.
func NewRedis(rdb redis.UniversalClient, prefix string, cfg Config) *Redis {
	return &Redis{rdb: rdb, key: prefix + "requests", cfg: cfg.withDefaults(), timeout: time.Second}
}

// Add implements Log: the batch in one round trip.
func (r *Redis) Add(ctx context.Context, es []Entry) error {
	if len(es) == 0 {
		return nil
	}
	vals := make([]any, 0, len(es))
	for _, e := range es {
		b, err := json.Marshal(r.cfg.prepare(e))
		if err != nil {
			return err
		}
		vals = append(vals, b)
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.LPush(ctx, r.key, vals...)
		p.LTrim(ctx, r.key, 0, int64(r.cfg.Kept()-1))
		return nil
	})
	return err
}

// List implements Log.
func (r *Redis) List(ctx context.Context, f Filter) ([]Entry, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	raw, err := r.rdb.LRange(ctx, r.key, 0, -1).Result()
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, s := range raw {
		if f.Limit > 0 && len(out) >= f.Limit {
			break
		}
		var e Entry
		if json.Unmarshal([]byte(s), &e) == nil && f.matches(&e) {
			out = append(out, e)
		}
	}
	return out, nil
}

// scrubScript rewrites, in place and in one step, every entry of the list
// KEYS[1] that holds a prompt or an answer, without them.
var scrubScript = redis.NewScript(`
local n = 0
local items = redis.call('LRANGE', KEYS[1], 0, -1)
for i, v in ipairs(items) do
  if string.find(v, '"prompt":', 1, true) or string.find(v, '"answer":', 1, true) then
    local ok, e = pcall(cjson.decode, v)
    if ok and type(e) == 'table' then
      e.prompt = nil
      e.answer = nil
      redis.call('LSET', KEYS[1], i - 1, cjson.encode(e))
      n = n + 1
    end
  end
end
return n
`)

// Scrub implements Log.
func (r *Redis) Scrub(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*r.timeout)
	defer cancel()
	n, err := scrubScript.Run(ctx, r.rdb, []string{r.key}).Int()
	return n, err
}
