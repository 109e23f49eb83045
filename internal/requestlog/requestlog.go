// Package requestlog keeps the last requests the gateway served: when, whose
// key, which account and model, the conversation's name, the protocol, the
// status, the latency, the tokens, whether the upstream session was reused,
// and the error if any.
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
	"sync"
	"time"
	"unicode/utf8"
)

// Entry is one served request.
type Entry struct {
	Time      time.Time `json:"time"`
	RequestID string    `json:"request_id"`
	// TraceID is the request's trace when it was traced.
	TraceID  string `json:"trace_id,omitempty"`
	Key      string `json:"key"`
	Account  string `json:"account"`
	Instance string `json:"instance"`
	Model    string `json:"model"`
	// Conversation names the request's conversation (a keyed hash, the
	// same for all its turns; pool/route), "" when it reached no router.
	Conversation string `json:"conversation,omitempty"`
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
	for _, s := range []*string{&e.RequestID, &e.Key, &e.Account, &e.Instance, &e.Model, &e.Conversation, &e.Protocol} {
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
	// Add stores a batch of entries (oldest first). seq numbers the batch
	// among those of one writer (internal/batch's order); a batch tried
	// again after an error keeps its seq and is stored at most once. 0 is
	// no number: the batch is stored as often as it is given.
	Add(ctx context.Context, seq uint64, es []Entry) error
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

// Add implements Log. A Memory cannot fail, so no batch is given twice: seq
// is not needed.
func (m *Memory) Add(_ context.Context, _ uint64, es []Entry) error {
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
