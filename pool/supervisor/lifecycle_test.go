package supervisor_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/supervisor/supervisortest"
)

// The supervisor's life cycle against fake workers (supervisortest), in a
// synctest bubble: every wait is on the fake clock.

// fakeSupervisor runs the real supervisor made with cfg over f's workers
// until the test ends; set, when given, subscribes what must be there
// before Start.
func fakeSupervisor(t *testing.T, f *supervisortest.Workers, cfg supervisor.Config, set func(*supervisor.Supervisor), names ...string) *supervisor.Supervisor {
	t.Helper()
	s := supervisor.New(cfg, supervisortest.Drive(f, supervisortest.Configs(t, false, names...)), f, nil, slog.New(slog.DiscardHandler))
	if set != nil {
		set(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.Start(ctx)
	t.Cleanup(func() { cancel(); s.Shutdown() })
	return s
}

// TestLoginTargetReleasedOnPurposeOnly: a worker run ended by the supervisor
// on purpose (drain, stop, restart) closes the Released channel of its
// login targets, so a login under way is abandoned; a crash does not (the
// login goes on against the next run, within its attempts).
func TestLoginTargetReleasedOnPurposeOnly(t *testing.T) {
	tests := []struct {
		name string
		give func(s *supervisor.Supervisor, f *supervisortest.Workers)
		want bool
	}{
		{"drain", func(s *supervisor.Supervisor, _ *supervisortest.Workers) { _ = s.Drain("acct-1") }, true},
		{"stop", func(s *supervisor.Supervisor, _ *supervisortest.Workers) { _ = s.Stop("acct-1") }, true},
		{"restart", func(s *supervisor.Supervisor, _ *supervisortest.Workers) { _ = s.Restart("acct-1") }, true},
		{"crash", func(_ *supervisor.Supervisor, f *supervisortest.Workers) { f.Crash("acct-1") }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := supervisortest.New("acct-1")
				logins := &supervisortest.Loginer{}
				s := fakeSupervisor(t, f, supervisor.Config{Loginer: logins}, nil, "acct-1")
				time.Sleep(time.Second)
				target, ok := logins.Asked()["acct-1"]
				if !ok || target.Released == nil {
					t.Fatalf("no login target tied to the worker run (logins asked: %v)", logins.Names())
				}
				tt.give(s, f)
				time.Sleep(time.Second)
				got := false
				select {
				case <-target.Released:
					got = true
				default:
				}
				if got != tt.want {
					t.Errorf("released = %v, want %v", got, tt.want)
				}
			})
		})
	}
}

// reports collects what a supervisor reports.
type reports struct {
	mu  sync.Mutex
	got []supervisor.Status
}

func (r *reports) add(st supervisor.Status) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, st)
}

func (r *reports) last() supervisor.Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[len(r.got)-1]
}

func (r *reports) states() []supervisor.State {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []supervisor.State
	for _, st := range r.got {
		if len(out) == 0 || out[len(out)-1] != st.State {
			out = append(out, st.State)
		}
	}
	return out
}

// A worker reports every change of its state, and its last report is its
// state now: what the admission room's view is built from.
func TestWorkerReportsEveryChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := supervisortest.New()
		var r reports
		s := fakeSupervisor(t, f, supervisor.Config{Reports: []func(supervisor.Status){r.add}}, nil, "w1")
		w, _ := s.Worker("w1")
		time.Sleep(time.Second)
		if got := r.states(); !slices.Equal(got, []supervisor.State{supervisor.StateStarting, supervisor.StateReady}) {
			t.Errorf("states reported %v, want starting, ready", got)
		}
		if st := r.last(); st.PID == 0 || st.Backend == nil || st.Seq != w.Status().Seq {
			t.Errorf("last report %+v, want the running worker as it is now (seq %d)", st, w.Status().Seq)
		}
		// A check asked for is reported once it passes, though nothing
		// else changed: the admission room ends a cooldown on it.
		first := r.last().CheckedAt
		time.Sleep(time.Second)
		w.Check()
		synctest.Wait()
		if st := r.last(); first.IsZero() || !st.CheckedAt.After(first) || st.State != supervisor.StateReady {
			t.Errorf("after an asked check the last report is %+v, want ready and checked after %v", st, first)
		}
		f.Crash("w1")
		time.Sleep(time.Second)
		if got := r.states(); !slices.Equal(got[len(got)-3:], []supervisor.State{supervisor.StateBackoff, supervisor.StateStarting, supervisor.StateReady}) {
			t.Errorf("states reported after a crash %v, want backoff, starting, ready", got)
		}
		if st := r.last(); st.Seq != w.Status().Seq || st.PID != w.Status().PID {
			t.Errorf("last report %+v is not the worker now", st)
		}
	})
}

// turns is a Turns whose count the test sets.
type turns struct {
	mu      sync.Mutex
	n       int
	changed chan struct{}
}

func (c *turns) InFlight(string) (int, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n, c.changed
}

func (c *turns) set(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n = n
	close(c.changed)
	c.changed = make(chan struct{})
}

// A drain takes the worker out of rotation at once and stops it when its
// last turn has ended, not before.
func TestDrainWaitsForTheTurns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &turns{n: 2, changed: make(chan struct{})}
		s := fakeSupervisor(t, supervisortest.New(), supervisor.Config{Busy: c}, nil, "w1")
		w, _ := s.Worker("w1")
		time.Sleep(time.Second)
		w.Drain()
		time.Sleep(5 * time.Second)
		if st := w.Status().State; st != supervisor.StateDraining {
			t.Fatalf("w1 is %s with turns in flight, want draining", st)
		}
		c.set(1)
		time.Sleep(time.Second)
		if st := w.Status().State; st != supervisor.StateDraining {
			t.Fatalf("w1 is %s with a turn in flight, want draining", st)
		}
		c.set(0)
		if !s.WaitStopped("w1", time.Now().Add(5*time.Second)) {
			t.Fatalf("w1 is %s after its last turn, want stopped", w.Status().State)
		}
	})
}
