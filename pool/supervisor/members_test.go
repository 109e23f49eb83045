package supervisor_test

import (
	"errors"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/supervisor/supervisortest"
)

// members records what a supervisor tells its membership subscribers.
type members struct {
	mu     sync.Mutex
	events []string
}

func (m *members) Joined(w *supervisor.Worker) { m.add("joined " + w.Name()) }
func (m *members) Left(name string)            { m.add("left " + name) }

func (m *members) add(e string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.events = append(m.events, e)
}

func (m *members) got() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.events)
}

// TestApplyChangesTheSetWhileItRuns: Apply starts a new worker at once,
// drains a removed one and returns only once its turns ended and its
// process stopped, replaces a changed one (a new worker on the new config)
// and leaves an unchanged one running as it was; the subscribers hear of
// each change, and the set takes the configured order.
func TestApplyChangesTheSetWhileItRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := supervisortest.New()
		c := &turns{n: 1, changed: make(chan struct{})}
		var m members
		s := fakeSupervisor(t, f, supervisor.Config{Busy: c}, func(s *supervisor.Supervisor) { s.SubscribeMembers(&m) },
			"w1", "w2", "w3")
		time.Sleep(time.Second)
		w3, _ := s.Worker("w3")
		w3pid := w3.Status().PID
		w1exited := f.Exited("w1")

		want := supervisortest.Drive(f, supervisortest.Configs(t, false, "w2", "w3", "w4"))
		want[0].Recipe = "another" // w2 changed
		want[1].WorkDir = w3.WorkDir()
		w2dir, _ := s.Worker("w2")
		want[0].WorkDir = w2dir.WorkDir()
		type applied struct {
			ch  supervisor.Changes
			err error
		}
		done := make(chan applied, 1)
		go func() {
			ch, err := s.Apply(want)
			done <- applied{ch, err}
		}()
		time.Sleep(5 * time.Second)
		select {
		case a := <-done:
			t.Fatalf("Apply returned %+v with a removed worker's turn in flight", a)
		default:
		}
		if w4, ok := s.Worker("w4"); !ok || w4.Status().State != supervisor.StateReady {
			t.Errorf("the added worker is not serving while the removed one drains (%v)", ok)
		}
		if w1, _ := s.Worker("w1"); w1.Status().State != supervisor.StateDraining {
			t.Errorf("removed w1 is %s with a turn in flight, want draining", w1.Status().State)
		}
		c.set(0)
		a := <-done
		if a.err != nil {
			t.Fatal(a.err)
		}
		wantCh := supervisor.Changes{Added: []string{"w4"}, Removed: []string{"w1"}, Changed: []string{"w2"}}
		if !slices.Equal(a.ch.Added, wantCh.Added) || !slices.Equal(a.ch.Removed, wantCh.Removed) ||
			!slices.Equal(a.ch.Changed, wantCh.Changed) {
			t.Errorf("changes %+v, want %+v", a.ch, wantCh)
		}
		if got, want := m.got(), []string{"joined w4", "left w1", "left w2", "joined w2"}; !slices.Equal(got, want) {
			t.Errorf("membership reports %v, want %v", got, want)
		}
		if got := s.Names(); !slices.Equal(got, []string{"w2", "w3", "w4"}) {
			t.Errorf("names %v, want the configured order w2 w3 w4", got)
		}
		select {
		case <-w1exited:
		default:
			t.Error("w1's process still runs after Apply")
		}
		if _, ok := s.Worker("w1"); ok {
			t.Error("w1 is still in the set")
		}
		time.Sleep(time.Second)
		if w2, _ := s.Worker("w2"); w2.Status().State != supervisor.StateReady {
			t.Errorf("replaced w2 is %s, want ready on its new config", w2.Status().State)
		}
		if now, _ := s.Worker("w3"); now != w3 || now.Status().PID != w3pid {
			t.Error("unchanged w3 was restarted")
		}
		if ch, err := s.Apply(want); err != nil || !ch.Empty() {
			t.Errorf("the same config again: %+v, %v; want no change", ch, err)
		}
	})
}

// TestApplyAfterShutdownStartsNothing: once Shutdown began, Apply refuses.
func TestApplyAfterShutdownStartsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := supervisortest.New()
		s := supervisor.New(supervisor.Config{}, supervisortest.Drive(f, supervisortest.Configs(t, false, "w1")), f, nil, slog.New(slog.DiscardHandler))
		s.Start(t.Context())
		time.Sleep(time.Second)
		s.Shutdown()
		if _, err := s.Apply(supervisortest.Drive(f, supervisortest.Configs(t, false, "w1", "w2"))); !errors.Is(err, supervisor.ErrShutDown) {
			t.Errorf("Apply after Shutdown: %v, want ErrShutDown", err)
		}
	})
}
