// Package usage counts what each API key and each account used: requests,
// input and output tokens, errors and upstream sessions reused, by hour and
// by day (UTC), kept for a configurable number of days. The counters live in
// Redis when there is one, so every replica adds to and reads the same
// totals, and in memory otherwise.
//
// Counting is off the request path: the daemon's batch writer takes one
// Record per finished request without blocking and adds them to the store
// in numbered batches, holding and retrying those that fail (a Redis
// failover), which the Redis store counts exactly once.
package usage

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"
)

// Record is one finished request.
type Record struct {
	Time time.Time
	// Key is the API key's name ("" when the gateway has no keys).
	Key string
	// Account is the account whose worker served the request ("" when
	// none did: refused before a worker took it).
	Account      string
	InputTokens  int64
	OutputTokens int64
	// Error: the request did not end in a complete answer.
	Error bool
	// Reused: the turn continued an upstream session.
	Reused bool
}

// Totals are summed counters.
type Totals struct {
	Requests     int64 `json:"requests"`
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	Errors       int64 `json:"errors"`
	Reused       int64 `json:"reused"`
}

func (t *Totals) add(o Totals) {
	t.Requests += o.Requests
	t.InputTokens += o.InputTokens
	t.OutputTokens += o.OutputTokens
	t.Errors += o.Errors
	t.Reused += o.Reused
}

func (r *Record) totals() Totals {
	t := Totals{Requests: 1, InputTokens: r.InputTokens, OutputTokens: r.OutputTokens}
	if r.Error {
		t.Errors = 1
	}
	if r.Reused {
		t.Reused = 1
	}
	return t
}

// Row is the totals of one key and account in one bucket.
type Row struct {
	// Bucket is the hour ("2026-11-23T19") or the day ("2026-11-23"), UTC.
	Bucket  string `json:"bucket"`
	Key     string `json:"key"`
	Account string `json:"account"`
	Totals
}

// Query selects rows. Empty Key or Account selects all; From and To bound
// the buckets (both included; zero From means the oldest kept, zero To now).
type Query struct {
	Key, Account string
	From, To     time.Time
	// Hourly asks for hour buckets instead of days.
	Hourly bool
}

// Store keeps the counters.
type Store interface {
	// Add adds a batch of records. seq numbers the batch among those of
	// one writer (internal/batch's order); a batch tried again after an
	// error keeps its seq and is counted at most once. 0 is no number:
	// the batch is added as often as it is given.
	Add(ctx context.Context, seq uint64, recs []Record) error
	// Query returns the matching rows, by bucket, key and account.
	Query(ctx context.Context, q Query) ([]Row, error)
}

// Bucket layouts.
const (
	hourLayout = "2006-01-02T15"
	dayLayout  = "2006-01-02"
)

// bucketsOf lists the buckets from..to (UTC, both included), oldest first,
// at most max of them (the newest).
func bucketsOf(from, to time.Time, hourly bool, max int) []string {
	step, layout := 24*time.Hour, dayLayout
	from, to = from.UTC(), to.UTC()
	if hourly {
		step, layout = time.Hour, hourLayout
		from, to = from.Truncate(time.Hour), to.Truncate(time.Hour)
	} else {
		from = time.Date(from.Year(), from.Month(), from.Day(), 0, 0, 0, 0, time.UTC)
		to = time.Date(to.Year(), to.Month(), to.Day(), 0, 0, 0, 0, time.UTC)
	}
	var out []string
	for t := to; !t.Before(from) && len(out) < max; t = t.Add(-step) {
		out = append(out, t.Format(layout))
	}
	slices.Reverse(out)
	return out
}

// span resolves a query's bounds against now and the retention.
func (q Query) span(now time.Time, retention time.Duration) (from, to time.Time) {
	from, to = q.From, q.To
	oldest := now.Add(-retention)
	if from.IsZero() || from.Before(oldest) {
		from = oldest
	}
	if to.IsZero() || to.After(now) {
		to = now
	}
	return from, to
}

func (q Query) matches(key, account string) bool {
	return (q.Key == "" || q.Key == key) && (q.Account == "" || q.Account == account)
}

func sortRows(rows []Row) {
	slices.SortFunc(rows, func(a, b Row) int {
		return cmp.Or(strings.Compare(a.Bucket, b.Bucket), strings.Compare(a.Key, b.Key), strings.Compare(a.Account, b.Account))
	})
}

// Sum adds rows up.
func Sum(rows []Row) Totals {
	var t Totals
	for _, r := range rows {
		t.add(r.Totals)
	}
	return t
}
