package supervisor

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"
)

// Changing the set of workers while they serve (a configuration reload).
// A worker is never changed in place: its config is read without a lock all
// over its loop, so a changed account is a retired worker followed by a new
// one of the same name, on the same work dir (its credentials stay).

// ErrShutDown: the supervisor is shutting down and starts nothing more.
var ErrShutDown = errors.New("supervisor is shutting down")

// Members is told when the set of workers changes: the admission room
// keeps a member per worker, the cluster fences a new account until it wins
// its lease and lets go of a removed one's. Calls come from Apply, one at a
// time, without the supervisor's lock held.
type Members interface {
	// Joined: w is in the set; its loop has not started yet.
	Joined(w *Worker)
	// Left: the named worker's loop has ended and its process is stopped;
	// it is out of the set.
	Left(name string)
}

// SubscribeMembers has m told of every change of the set from now on, after
// Config.Members; call before Start. It is for what is made after the
// supervisor because it drives the supervisor's workers (pool/cluster's
// Cluster): m is not told of the set as it is now.
func (s *Supervisor) SubscribeMembers(m Members) {
	s.env.members = append(s.env.members, m)
}

// run is one started worker's loop: its own context, so a retired worker
// ends alone, and the signal that its loop returned.
type run struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startLocked starts w's loop; s.mu held, after Start.
func (s *Supervisor) startLocked(w *Worker) {
	ctx, cancel := context.WithCancel(s.ctx)
	r := &run{cancel: cancel, done: make(chan struct{})}
	s.runs[w.cfg.Name] = r
	s.env.wg.Go(func() {
		defer close(r.done)
		w.run(ctx)
	})
}

// Changes is what Apply did, by instance name, each list in config order.
type Changes struct {
	Added   []string
	Removed []string
	// Changed were drained, stopped and started again on their new config.
	Changed []string
	// Restarted were failed (restarts.go) and are started again: a reload
	// is an operator's word that what failed them may be fixed.
	Restarted []string
}

// Empty reports whether Apply changed nothing.
func (c Changes) Empty() bool { return len(c.Added)+len(c.Removed)+len(c.Changed) == 0 }

// Apply makes the set of workers the configured one and returns when it is:
// new workers are started (or held, as their config says), removed ones
// drained (their turns finish, bounded by the drain timeout), stopped and
// dropped, and changed ones (any field of their config differs) replaced one
// at a time, so a change to every account never empties the pool at once.
// The new list's order becomes the set's order. Calls are serialised.
func (s *Supervisor) Apply(workers []WorkerConfig) (Changes, error) {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	want := make(map[string]WorkerConfig, len(workers))
	order := make([]string, 0, len(workers))
	for _, wc := range workers {
		wc.fill()
		if _, dup := want[wc.Name]; dup {
			return Changes{}, fmt.Errorf("instance %s is configured twice", wc.Name)
		}
		want[wc.Name] = wc
		order = append(order, wc.Name)
	}
	var ch Changes
	var removed []*Worker
	s.mu.RLock()
	closed := s.closed
	var failed []*Worker
	for _, name := range order {
		switch old, ok := s.byName[name]; {
		case !ok:
			ch.Added = append(ch.Added, name)
		case !reflect.DeepEqual(old.cfg, want[name]):
			ch.Changed = append(ch.Changed, name)
		case old.Status().State == StateFailed:
			failed = append(failed, old)
			ch.Restarted = append(ch.Restarted, name)
		}
	}
	for _, w := range s.workers {
		if _, keep := want[w.cfg.Name]; !keep {
			removed = append(removed, w)
			ch.Removed = append(ch.Removed, w.cfg.Name)
		}
	}
	s.mu.RUnlock()
	if closed {
		return Changes{}, ErrShutDown
	}
	// The removed leave the rotation before the added start, so a new turn
	// never lands on an account the new set drops. A worker busy with a
	// health check takes the drain when the check ends.
	for _, w := range removed {
		w.Drain()
	}
	for _, w := range removed {
		w.await(func(st State) bool { return st != StateReady }, time.Now().Add(w.cfg.HealthTimeout))
	}
	for _, name := range ch.Added {
		s.join(want[name])
	}
	var wg sync.WaitGroup
	for _, w := range removed {
		wg.Go(func() { s.retire(w, true) })
	}
	wg.Wait()
	for _, name := range ch.Changed {
		if w, ok := s.Worker(name); ok {
			s.retire(w, false)
		}
		s.join(want[name])
	}
	for _, w := range failed {
		w.Restart()
	}
	s.reorder(order)
	return ch, nil
}

// join adds a worker for wc, tells the subscribers, then starts it (when the
// supervisor runs).
func (s *Supervisor) join(wc WorkerConfig) {
	w := s.newWorker(wc)
	s.mu.Lock()
	s.add(w)
	s.mu.Unlock()
	for _, m := range s.env.members {
		m.Joined(w)
	}
	s.mu.Lock()
	if s.ctx != nil && !s.closed {
		s.startLocked(w)
	}
	s.mu.Unlock()
	w.log.Info("worker added")
}

// retire drains w (its turns finish, bounded by the drain timeout, then a
// stop grace), ends its loop, drops it from the set and tells the
// subscribers. dropSeries also drops its metric series (the account is gone,
// not replaced).
func (s *Supervisor) retire(w *Worker, dropSeries bool) {
	name := w.cfg.Name
	start := time.Now()
	w.Drain()
	if !s.WaitStopped(name, start.Add(s.env.drainTimeout+w.cfg.StopGrace)) {
		w.log.Warn("worker did not stop after its drain: stopping it now")
	}
	s.mu.Lock()
	r := s.runs[name]
	delete(s.runs, name)
	delete(s.byName, name)
	for i, x := range s.workers {
		if x == w {
			s.workers = append(s.workers[:i:i], s.workers[i+1:]...)
			break
		}
	}
	s.mu.Unlock()
	if r != nil {
		r.cancel()
		<-r.done
	}
	for _, m := range s.env.members {
		m.Left(name)
	}
	if m := s.env.metrics; m != nil && dropSeries {
		m.Restarts.DeleteLabelValues(name)
		m.Handovers.DeleteLabelValues(name)
	}
	w.log.Info("worker removed", "after", time.Since(start).Round(time.Millisecond))
}

// reorder puts the set in the configured order.
func (s *Supervisor) reorder(order []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Worker, 0, len(s.workers))
	for _, name := range order {
		if w, ok := s.byName[name]; ok {
			out = append(out, w)
		}
	}
	s.workers = out
}
