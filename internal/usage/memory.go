package usage

import (
	"context"
	"sync"
	"time"
)

// Memory is the Store of a single replica without Redis.
type Memory struct {
	retention time.Duration
	now       func() time.Time

	mu      sync.Mutex
	buckets map[bucket]map[slot]Totals
}

type bucket struct {
	name   string
	hourly bool
}

type slot struct{ key, account string }

// NewMemory keeps counters for retention (at least a day).
func NewMemory(retention time.Duration, now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{retention: max(retention, 24*time.Hour), now: now, buckets: map[bucket]map[slot]Totals{}}
}

// Add implements Store. A Memory cannot fail, so no batch is given twice:
// seq is not needed.
func (m *Memory) Add(_ context.Context, _ uint64, recs []Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range recs {
		r := &recs[i]
		t := r.Time.UTC()
		s := slot{r.Key, r.Account}
		for _, b := range []bucket{{t.Format(hourLayout), true}, {t.Format(dayLayout), false}} {
			byslot := m.buckets[b]
			if byslot == nil {
				byslot = map[slot]Totals{}
				m.buckets[b] = byslot
			}
			tot := byslot[s]
			tot.add(r.totals())
			byslot[s] = tot
		}
	}
	m.prune()
	return nil
}

// prune drops buckets past the retention; m.mu held.
func (m *Memory) prune() {
	oldest := m.now().UTC().Add(-m.retention)
	oldHour, oldDay := oldest.Format(hourLayout), oldest.Format(dayLayout)
	for b := range m.buckets {
		if b.hourly && b.name < oldHour || !b.hourly && b.name < oldDay {
			delete(m.buckets, b)
		}
	}
}

// Query implements Store.
func (m *Memory) Query(_ context.Context, q Query) ([]Row, error) {
	from, to := q.span(m.now(), m.retention)
	names := bucketsOf(from, to, q.Hourly, int(m.retention/time.Hour)+48)
	m.mu.Lock()
	defer m.mu.Unlock()
	var rows []Row
	for _, name := range names {
		for s, t := range m.buckets[bucket{name, q.Hourly}] {
			if q.matches(s.key, s.account) {
				rows = append(rows, Row{Bucket: name, Key: s.key, Account: s.account, Totals: t})
			}
		}
	}
	sortRows(rows)
	return rows, nil
}
