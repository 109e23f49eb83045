package batch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/poolgate/poolgate/internal/testenv"
)

func TestWriterBatchesAndFlushesOnClose(t *testing.T) {
	var mu sync.Mutex
	var batches [][]int
	w := New(Config{Size: 3, Every: time.Hour}, func(_ context.Context, _ uint64, b []int) error {
		mu.Lock()
		batches = append(batches, append([]int(nil), b...))
		mu.Unlock()
		return nil
	})
	for i := range 7 {
		w.Add(i)
	}
	testenv.WaitFor(t, 5*time.Second, "two full batches", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(batches) == 2
	})
	if lost := w.Close(); lost != 0 {
		t.Errorf("Close() = %d lost, want 0", lost)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(batches) != 3 || len(batches[0]) != 3 || len(batches[2]) != 1 || batches[2][0] != 6 {
		t.Errorf("batches %v, want [0 1 2] [3 4 5] [6]", batches)
	}
}

func TestWriterFlushesOnTimeAndReportsErrors(t *testing.T) {
	failed := make(chan int, 1)
	w := New(Config{Size: 100, Every: 10 * time.Millisecond, OnError: func(_ error, n int) {
		select {
		case failed <- n:
		default:
		}
	}}, func(context.Context, uint64, []string) error { return errors.New("down") })
	defer w.Close()
	w.Add("a")
	w.Add("b")
	select {
	case n := <-failed:
		if n != 2 {
			t.Errorf("failed batch of %d, want 2", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no timed flush")
	}
}

func TestWriterDropsWhenFull(t *testing.T) {
	release := make(chan struct{})
	w := New(Config{Queue: 2, Size: 1, Every: time.Hour}, func(context.Context, uint64, []int) error {
		<-release
		return nil
	})
	w.Add(0) // taken by the flush that blocks
	testenv.WaitFor(t, 5*time.Second, "the first value taken", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.pending) == 0
	})
	w.Add(1)
	w.Add(2)
	if w.Add(3) || w.Dropped() != 1 {
		t.Errorf("Add on a full queue: dropped %d, want 1", w.Dropped())
	}
	close(release)
	w.Close()
}

// store is a flush target that is down until told otherwise and records
// what it was sent.
type store struct {
	mu    sync.Mutex
	down  bool
	tries []string // "seq:values" of every flush, in order
	kept  []int    // the values of the flushes that went through
}

func (s *store) flush(_ context.Context, seq uint64, vals []int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tries = append(s.tries, fmt.Sprintf("%d:%v", seq, vals))
	if s.down {
		return errors.New("connection refused")
	}
	s.kept = append(s.kept, vals...)
	return nil
}

func (s *store) set(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

// events records the outage callbacks.
type events struct {
	mu  sync.Mutex
	log []string
}

func (e *events) add(s string) {
	e.mu.Lock()
	e.log = append(e.log, s)
	e.mu.Unlock()
}

// A batch that fails is held and tried again, first and under its own seq,
// every Retry; values added meanwhile wait behind it (filling a batch no
// flush tried yet) and go once it went through. The outage is reported
// once when it starts and once when everything is written.
func TestWriterHoldsAndRetriesInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &store{down: true}
		var ev events
		w := New(Config{Size: 2, Every: 100 * time.Millisecond, Retry: time.Second,
			OnOutage:  func(err error) { ev.add("outage: " + err.Error()) },
			OnRecover: func(late, dropped int) { ev.add(fmt.Sprintf("recovered: %d late, %d dropped", late, dropped)) },
		}, s.flush)
		w.Add(1)
		time.Sleep(150 * time.Millisecond) // the first tick tries [1]
		w.Add(2)
		w.Add(3) // [2 3] is full: no flush while [1] waits for its retry
		time.Sleep(300 * time.Millisecond)
		w.Add(4)
		time.Sleep(300 * time.Millisecond)
		synctest.Wait()
		if got := w.Held(); got != 4 {
			t.Errorf("Held() during the outage = %d, want 4", got)
		}
		s.set(false)
		time.Sleep(time.Second) // the retry
		synctest.Wait()
		if got := w.Held(); got != 0 {
			t.Errorf("Held() after the retry = %d, want 0", got)
		}
		w.Close()
		wantTries := []string{"1:[1]", "1:[1]", "2:[2 3]", "3:[4]"}
		if !slices.Equal(s.tries, wantTries) {
			t.Errorf("flushes %q, want %q", s.tries, wantTries)
		}
		if !slices.Equal(s.kept, []int{1, 2, 3, 4}) {
			t.Errorf("written %v, want [1 2 3 4]", s.kept)
		}
		wantEv := []string{"outage: connection refused", "recovered: 4 late, 0 dropped"}
		if !slices.Equal(ev.log, wantEv) {
			t.Errorf("callbacks %q, want %q", ev.log, wantEv)
		}
	})
}

// Held values are bounded: past Hold the oldest batches go, counted; what
// is still held when Close's last try fails is lost, and Close says so.
func TestWriterBoundsWhatItHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &store{down: true}
		var mu sync.Mutex
		dropped := 0
		w := New(Config{Size: 2, Hold: 4, Every: 100 * time.Millisecond, Retry: time.Hour,
			OnDrop: func(n int) { mu.Lock(); dropped += n; mu.Unlock() }}, s.flush)
		time.Sleep(50 * time.Millisecond) // between ticks: each tick cuts one value
		for i := range 8 {
			w.Add(i)
			time.Sleep(100 * time.Millisecond)
		}
		synctest.Wait()
		held := w.Held()
		if held == 0 || held > 4 {
			t.Errorf("Held() = %d, want some, at most the bound 4", held)
		}
		if lost := w.Close(); lost != held {
			t.Errorf("Close() = %d lost, want the %d held", lost, held)
		}
		mu.Lock()
		defer mu.Unlock()
		if dropped != 8 || w.Dropped() != 8 {
			t.Errorf("dropped %d (Dropped() %d), want all 8: past the bound, then at Close", dropped, w.Dropped())
		}
		if len(s.kept) != 0 {
			t.Errorf("written %v while down", s.kept)
		}
	})
}
