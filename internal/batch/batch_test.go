package batch

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/testenv"
)

func TestWriterBatchesAndFlushesOnClose(t *testing.T) {
	var mu sync.Mutex
	var batches [][]int
	w := New(Config{Size: 3, Every: time.Hour}, func(_ context.Context, b []int) error {
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
	w.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(batches) != 3 || len(batches[0]) != 3 || len(batches[2]) != 1 || batches[2][0] != 6 {
		t.Errorf("batches %v, want [0 1 2] [3 4 5] [6]", batches)
	}
}

func TestWriterFlushesOnTimeAndReportsErrors(t *testing.T) {
	failed := make(chan int, 1)
	w := New(Config{Size: 100, Every: 10 * time.Millisecond, OnError: func(_ error, n int) { failed <- n }},
		func(context.Context, []string) error { return errors.New("down") })
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
	w := New(Config{Queue: 2, Size: 1, Every: time.Hour}, func(context.Context, []int) error {
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
