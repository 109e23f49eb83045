package keylimits

import (
	"context"
	"sync"
	"time"
)

// Memory is the Limiter of a single replica without Redis.
type Memory struct {
	now func() time.Time

	mu   sync.Mutex
	keys map[string]*keyState
}

type keyState struct {
	window     int64 // the current minute (Unix minutes)
	prev, cur  int64 // requests in the previous and current minute
	inFlight   int
	day        int64 // the current day (Unix days)
	tokensUsed int64
}

// NewMemory returns an in-memory Limiter on the clock now (nil: time.Now).
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, keys: map[string]*keyState{}}
}

// Acquire implements Limiter.
func (m *Memory) Acquire(_ context.Context, key string, l Limits) (*Ticket, error) {
	if l.None() {
		return &Ticket{}, nil
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.state(key)
	s.roll(now)
	pos := time.Duration(now.UnixMilli()%60000) * time.Millisecond
	if l.RPM > 0 {
		frac := float64(pos) / float64(time.Minute)
		if float64(s.prev)*(1-frac)+float64(s.cur)+1 > float64(l.RPM) {
			return nil, &Denied{Key: key, Limit: LimitRPM, Max: int64(l.RPM), RetryAfter: rpmRetry(int64(l.RPM), s.prev, s.cur, pos)}
		}
	}
	if l.Concurrency > 0 && s.inFlight >= l.Concurrency {
		return nil, &Denied{Key: key, Limit: LimitConcurrency, Max: int64(l.Concurrency), RetryAfter: retryFloor}
	}
	if l.TokensPerDay > 0 && s.tokensUsed >= l.TokensPerDay {
		return nil, &Denied{Key: key, Limit: LimitTokensPerDay, Max: l.TokensPerDay, RetryAfter: untilTomorrow(now)}
	}
	if l.RPM > 0 {
		s.cur++
	}
	held := l.Concurrency > 0
	if held {
		s.inFlight++
	}
	return &Ticket{done: func(tokens int64) {
		m.mu.Lock()
		defer m.mu.Unlock()
		s.roll(m.now())
		if held {
			s.inFlight--
		}
		s.tokensUsed += tokens
	}}, nil
}

// Charge implements Limiter.
func (m *Memory) Charge(_ context.Context, key string, tokens int64) error {
	if tokens <= 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.state(key)
	s.roll(m.now())
	s.tokensUsed += tokens
	return nil
}

// spent notes that key used its quota of today's tokens (Redis said so),
// so that these limits refuse it too while Redis is away.
func (m *Memory) spent(key string, quota int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.state(key)
	s.roll(m.now())
	s.tokensUsed = max(s.tokensUsed, quota)
}

// state is key's state, made on first use; m.mu must be held.
func (m *Memory) state(key string) *keyState {
	s := m.keys[key]
	if s == nil {
		s = &keyState{}
		m.keys[key] = s
	}
	return s
}

// roll moves the windows and the day to now's.
func (s *keyState) roll(now time.Time) {
	w := now.UnixMilli() / 60000
	switch {
	case w == s.window+1:
		s.prev, s.cur = s.cur, 0
	case w > s.window+1:
		s.prev, s.cur = 0, 0
	}
	s.window = max(s.window, w)
	if d := now.UnixMilli() / 86400000; d != s.day {
		s.day, s.tokensUsed = d, 0
	}
}
