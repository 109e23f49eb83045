package httpx

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestBudget(t *testing.T) {
	var gauge float64
	refused := 0
	b := NewBudget(100, 0, func(v float64) { gauge = v }, func() { refused++ })
	steps := []struct {
		take int64
		want bool
	}{{60, true}, {50, false}, {40, true}, {1, false}}
	for _, s := range steps {
		if got := b.Take("", s.take); got != s.want {
			t.Fatalf("Take(%d) = %v with %d held, want %v", s.take, got, b.Held(), s.want)
		}
	}
	b.Put("", 60)
	if b.Held() != 40 || gauge != 40 || refused != 2 {
		t.Errorf("held %d, gauge %v, %d refusals; want 40, 40, 2", b.Held(), gauge, refused)
	}
}

// TestBudgetPerKey: one key holds at most its share; the others, and a
// caller of no key, still find the rest.
func TestBudgetPerKey(t *testing.T) {
	b := NewBudget(100, 50, nil, nil)
	steps := []struct {
		key  string
		take int64
		want bool
	}{
		{"a", 40, true},
		{"a", 20, false}, // over a's share, with room left in the budget
		{"b", 50, true},
		{"", 10, true},
		{"", 1, false}, // the budget is full
	}
	for _, s := range steps {
		if got := b.Take(s.key, s.take); got != s.want {
			t.Fatalf("Take(%q, %d) = %v with %d held, want %v", s.key, s.take, got, b.Held(), s.want)
		}
	}
	b.Put("a", 40)
	if !b.Take("a", 40) || b.Take("a", 11) {
		t.Error("a's share was not given back whole, or grew past 50")
	}
	if got := NewBudget(100, 0, nil, nil).PerKey(); got != 100 {
		t.Errorf("PerKey of no share = %d, want the whole budget", got)
	}
}

// TestReaderReservesAsItReads: a body of unknown length reserves room as
// it arrives and fails with ErrBudget once there is none; it holds what it
// read, no more than the budget.
func TestReaderReservesAsItReads(t *testing.T) {
	tests := []struct {
		name    string
		budget  int64
		size    int
		wantErr error
	}{
		{"fits", 4 * budgetStep, 3*budgetStep + 10, nil},
		{"too large", 2 * budgetStep, 3 * budgetStep, ErrBudget},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBudget(tt.budget, 0, nil, nil)
			r := &Reader{R: strings.NewReader(strings.Repeat("x", tt.size)), B: b}
			got, err := io.ReadAll(r)
			if !errors.Is(err, tt.wantErr) || (err == nil && len(got) != tt.size) {
				t.Errorf("read %d bytes, %v; want %d, %v", len(got), err, tt.size, tt.wantErr)
			}
			if r.Taken > tt.budget || b.Held() != r.Taken || (err == nil && r.Taken != int64(tt.size)) {
				t.Errorf("reserved %d, budget holds %d of %d", r.Taken, b.Held(), tt.budget)
			}
		})
	}
}

// TestSlots: a free slot is taken at once; with none free a taker waits the
// slots' wait and is refused, or is refused when its context ends first; a
// released slot is taken again.
func TestSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := NewSlots(1, 2*time.Second)
		if !s.Take(t.Context()) || s.Held() != 1 {
			t.Fatal("the free slot was not taken")
		}
		start := time.Now()
		if s.Take(t.Context()) {
			t.Fatal("a second slot of one was taken")
		}
		if waited := time.Since(start); waited != 2*time.Second {
			t.Errorf("refused after %s, want the 2s wait", waited)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		start = time.Now()
		if s.Take(ctx) || time.Since(start) != 500*time.Millisecond {
			t.Errorf("a taker whose context ended after 500ms waited %s", time.Since(start))
		}
		s.Release()
		if !s.Take(t.Context()) {
			t.Error("the released slot was not taken again")
		}
	})
}
