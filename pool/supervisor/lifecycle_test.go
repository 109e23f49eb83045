package supervisor_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/poolgate/poolgate/pool/supervisor"
	"github.com/poolgate/poolgate/pool/supervisor/supervisortest"
)

// The supervisor's life cycle against fake workers (supervisortest), in a
// synctest bubble: every wait is on the fake clock.

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fakeSupervisor runs the real supervisor over f's workers until the test
// ends; set, when given, installs what must be there before Start.
func fakeSupervisor(t *testing.T, f *supervisortest.Workers, set func(*supervisor.Supervisor), names ...string) *supervisor.Supervisor {
	t.Helper()
	dir := t.TempDir()
	var wcs []supervisor.WorkerConfig
	for _, n := range names {
		wcs = append(wcs, supervisor.WorkerConfig{Name: n, Account: supervisor.Account{Name: n}, WorkDir: dir + "/" + n,
			AutoLogin: true, HealthInterval: 300 * time.Millisecond, StopGrace: time.Second})
	}
	s := supervisor.New(supervisor.Config{}, wcs, f, f, nil, quiet())
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
				s := fakeSupervisor(t, f, func(s *supervisor.Supervisor) { s.SetLoginer(logins) }, "acct-1")
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
