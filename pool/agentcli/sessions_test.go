package agentcli_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/agentcli"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// Conversations interleaved on one account each keep their session: with
// room for both they stay live, with one live process the other is
// resumed for each of its turns.
func TestConversationsShareAnAccount(t *testing.T) {
	for _, live := range []int{1, 3} {
		t.Run("live="+string(rune('0'+live)), func(t *testing.T) {
			p := startPool(t, func(c *agentcli.Config) { c.LiveSessions = live }, account(t, "a1", "sk-test-key"))
			be := p.ready(t, "a1")
			sessions := make([]string, 3)
			for round := 1; round <= 3; round++ {
				for i := range sessions {
					r := mustOK(t, "turn", run(t, be, ask("[[sim:whoami]]", sessions[i])))
					want := "turn=" + string(rune('0'+round)) + " "
					if !strings.Contains(r.text, want) || sessions[i] != "" && r.done.SessionID != sessions[i] {
						t.Fatalf("conversation %d, round %d: %q on %s, want %q on %s", i, round, r.text,
							r.done.SessionID, want, sessions[i])
					}
					sessions[i] = r.done.SessionID
				}
			}
			if sessions[0] == sessions[1] || sessions[1] == sessions[2] {
				t.Errorf("conversations shared a session: %v", sessions)
			}
			if n := cliProcesses(t, p.status("a1").PID); n > live {
				t.Errorf("%d CLI processes run after the turns, want at most %d", n, live)
			}
		})
	}
}

// cliProcesses counts the simulated CLIs running in a session: the
// supervised one (pid) and those the driver spawned (children of this
// test process with the simulator's variable).
func cliProcesses(t *testing.T, pid int) int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	self := os.Getpid()
	for _, e := range entries {
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) < 2 || f[1] != itoa(self) || f[0] == "Z" {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.Contains(string(cmd), "\x00-p\x00") {
			n++
		}
	}
	_ = pid
	return n
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

// A worker that was restarted resumes the conversations of its old
// process (--resume), from the sessions the CLI kept in its config dir;
// a session the CLI never kept is refused before anything is sent.
func TestRestartedWorkerResumes(t *testing.T) {
	p := startPool(t, nil, account(t, "a1", "sk-test-key"))
	be := p.ready(t, "a1")
	r := mustOK(t, "first", run(t, be, ask("[[sim:whoami]]", "")))
	pid := p.status("a1").PID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "a new process", func() bool {
		st := p.status("a1")
		return st.State == supervisor.StateReady && st.PID != pid
	})
	be = p.ready(t, "a1")
	r2 := mustOK(t, "resumed", run(t, be, ask("[[sim:whoami]]", r.done.SessionID)))
	if !strings.Contains(r2.text, "turn=2 reply=true") || r2.done.SessionID != r.done.SessionID {
		t.Errorf("after a restart: %q on %s, want turn 2 of %s", r2.text, r2.done.SessionID, r.done.SessionID)
	}

	_, err := be.Start(context.Background(), ask("hello", "00000000-0000-4000-a000-000000000000"))
	if !errors.Is(err, chat.ErrNotSent) || !strings.Contains(err.Error(), "No conversation found") {
		t.Errorf("an unknown session: %v, want it refused as not sent, with the CLI's reason", err)
	}
}

// DeleteSession frees a session: no process continues it, and its
// transcript is gone, so a follow-up of it cannot be resumed either.
func TestDeleteSession(t *testing.T) {
	p := startPool(t, func(c *agentcli.Config) { c.LiveSessions = 1 }, account(t, "a1", "sk-test-key"))
	be := p.ready(t, "a1")
	mustOK(t, "one", run(t, be, ask("one", "")))
	r := mustOK(t, "two", run(t, be, ask("two", "")))
	if err := be.DeleteSession(context.Background(), r.done.SessionID); err != nil {
		t.Fatal(err)
	}
	if err := be.DeleteSession(context.Background(), "../../etc"); err == nil {
		t.Error("a session id that names a path was taken")
	}
	if _, err := be.Start(context.Background(), ask("three", r.done.SessionID)); !errors.Is(err, chat.ErrNotSent) {
		t.Errorf("a deleted session's follow-up: %v, want it refused as not sent", err)
	}
}

// The supervised process, once its session is deleted, serves nobody: it
// does not take the room of a live conversation.
func TestDeletedSessionLeavesRoom(t *testing.T) {
	p := startPool(t, func(c *agentcli.Config) { c.LiveSessions = 1 }, account(t, "a1", "sk-test-key"))
	be := p.ready(t, "a1")
	one := mustOK(t, "one", run(t, be, ask("one", "")))
	if err := be.DeleteSession(context.Background(), one.done.SessionID); err != nil {
		t.Fatal(err)
	}
	mustOK(t, "two", run(t, be, ask("two", "")))
	if n := cliProcesses(t, 0); n != 2 {
		t.Errorf("%d CLI processes after a new conversation, want 2: the idle supervised one and the new one, kept live", n)
	}
}
