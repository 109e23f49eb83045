package daemon

import (
	"context"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
)

// A replica that stops for a while (frozen here, as a busy machine starves
// one) but for less than its lease's margin keeps its accounts and their
// upstream sessions: a follow-up sent to the other replica hops to it and
// continues the session. A stall longer than the lease allows must fence
// the accounts instead (TestRedisOutageLongerThanALease); this one is
// longer than startCluster's three-second lease, which fenced it and lost
// the session, so TestAgentsCluster's follow-ups failed whenever the
// machine starved a replica that long between two turns.
func TestFollowUpAfterHolderStall(t *testing.T) {
	s := startCluster(t, 2, servingCluster)
	s.waitSpread(90 * time.Second)
	front := newSpreader(t, s)
	srv := httptest.NewServer(front)
	defer srv.Close()
	conv := &conversation{client: sdkURL(srv.URL)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	front.pin(0)
	a, err := conv.say(ctx, "hello [[sim:whoami]]")
	if err != nil {
		t.Fatal(err)
	}
	first := parseWhoami(t, a)
	away := front.away(t)
	freeze(t, s.replicas[1-away], 5*time.Second)
	// Both replicas tick again before the follow-up: a lease the stall
	// had cost would be fenced, or taken over, by then.
	time.Sleep(4 * time.Second)

	front.pin(away)
	a, err = conv.say(ctx, "and again [[sim:whoami]]")
	if err != nil {
		t.Fatal(err)
	}
	if got := parseWhoami(t, a); !got.reply || got.session != first.session {
		t.Errorf("follow-up after the holder stalled: %+v, want %s continued (reply=true)", got, first.session)
	}
	logSessionLosses(t, s)
}

// freeze stops d's process (not its workers, which run in their own process
// groups) for dur, then lets it run on.
func freeze(t *testing.T, d *daemontest.Daemon, dur time.Duration) {
	t.Helper()
	if err := syscall.Kill(d.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatalf("freeze replica: %v", err)
	}
	time.Sleep(dur)
	if err := syscall.Kill(d.Pid(), syscall.SIGCONT); err != nil {
		t.Fatalf("resume replica: %v", err)
	}
}
