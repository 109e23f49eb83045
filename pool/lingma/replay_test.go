package lingma

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/sim"
	"github.com/poolgate/poolgate/pool/worker/workertest"
)

// replaying runs the simulator playing the transcript at path.
func replaying(t *testing.T, path string) *workertest.Worker {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return startSim(t, "--replay="+abs)
}

// replayed waits (bounded) until the replay played everything or found a
// mismatch: the driver's last replies of a turn may still be on their way
// when its answer has ended.
func replayed(t *testing.T, w *workertest.Worker) sim.ReplayStats {
	t.Helper()
	var st sim.ReplayStats
	deadline := time.Now().Add(wait)
	for st = replayStats(t, w); !st.Done && st.Mismatch == "" && time.Now().Before(deadline); st = replayStats(t, w) {
		time.Sleep(20 * time.Millisecond)
	}
	return st
}

// replayStats is how far the simulator's replay got.
func replayStats(t *testing.T, w *workertest.Worker) sim.ReplayStats {
	t.Helper()
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(w.Endpoint.AuxPort) + "/sim/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st sim.Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.Replay == nil {
		t.Fatalf("sim stats: %v %+v", err, st)
	}
	return *st.Replay
}

// TestReplayEvidence plays the transcripts written from the public
// evidence (testdata/transcripts, each says which) against the driver: the
// driver must send what each holds, message for message, and make of the
// worker's answers what a real worker's answers mean.
func TestReplayEvidence(t *testing.T) {
	const sid = "8a7c1f0e-5b1d-4c1e-9f7a-2f4b6d1c0e11"
	ok := func(text, session string) func(*testing.T, []answer, error) {
		return func(t *testing.T, got []answer, err error) {
			if len(got) == 0 {
				t.Errorf("no answer: %v", err)
				return
			}
			last := got[len(got)-1]
			if err != nil || last.err != nil || last.text != text || last.done.SessionID != session {
				t.Errorf("answer %q in session %q (%v, %v), want %q in %q", last.text, last.done.SessionID, err, last.err, text, session)
			}
		}
	}
	tests := []struct {
		file  string
		turns []chat.Turn
		check func(*testing.T, []answer, error)
	}{
		{"plain-normal.jsonl", []chat.Turn{{Messages: user("Reply with exactly: pong")}}, ok("pong", sid)},
		{"followup.jsonl", []chat.Turn{{Messages: user("Reply with exactly: pong")}, {SessionID: sid, Messages: user("And again")}},
			ok("pong", sid)},
		{"finish-timeout.jsonl", []chat.Turn{{Messages: user("Reply with exactly: pong")}}, func(t *testing.T, got []answer, err error) {
			if err != nil || len(got) == 0 || !errors.Is(got[0].err, context.DeadlineExceeded) {
				t.Errorf("a 408 finish: %v, %v; want a timeout", err, got)
			}
		}},
		{"ask-refused.jsonl", []chat.Turn{{Messages: user("Reply with exactly: pong")}}, func(t *testing.T, _ []answer, err error) {
			if !errors.Is(err, chat.ErrNotLoggedIn) {
				t.Errorf("refused ask: %v, want ErrNotLoggedIn", err)
			}
		}},
		{"builtin-sync.jsonl", []chat.Turn{{Agent: true, Messages: user("Read README.md, say so.")}}, ok("I cannot read the file here.", "")},
		{"builtin-async.jsonl", []chat.Turn{{Agent: true, Messages: user("Read README.md, say so.")}}, ok("I cannot read the file here.", "")},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			w := replaying(t, filepath.Join("testdata", "transcripts", tt.file))
			c := connect(t, w, Config{})
			if st, err := c.Status(context.Background()); err != nil || !st.LoggedIn {
				t.Fatalf("Status = %+v, %v", st, err)
			}
			var got []answer
			var err error
			for i := range tt.turns {
				var a chat.Answer
				if a, err = c.Start(context.Background(), &tt.turns[i]); err != nil {
					break
				}
				got = append(got, collect(t, a))
			}
			tt.check(t, got, err)
			if st := replayed(t, w); !st.Done || st.Mismatch != "" {
				t.Errorf("replay %+v, want every message played and none different", st)
			}
		})
	}
}

// TestReplayMismatch: a driver that sends something the transcript does
// not hold gets a clear error naming the difference.
func TestReplayMismatch(t *testing.T) {
	w := replaying(t, filepath.Join("testdata", "transcripts", "plain-normal.jsonl"))
	c := connect(t, w, Config{Mode: ModeChat})
	_, err := c.Start(context.Background(), &chat.Turn{Messages: user("Reply with exactly: pong")})
	const want = `replay mismatch at message 1: params.mode: want "normal", got "chat"`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Start = %v, want an error with %q", err, want)
	}
	if st := replayStats(t, w); st.Mismatch == "" || st.Done {
		t.Errorf("replay %+v, want the mismatch reported", st)
	}
}

// TestRecordThenReplay: a transcript the driver records replays against
// the driver: that is how a real worker's turn becomes a regression test.
func TestRecordThenReplay(t *testing.T) {
	dir := t.TempDir()
	w := startSim(t, "--logged-in")
	c := connect(t, w, Config{Record: RecordConfig{All: true, Dir: dir}})
	turn := chat.Turn{RequestID: "rec", Messages: user("hello there [[sim:chunks=3]]")}
	want := runTurn(t, c, &turn)
	names, _ := filepath.Glob(filepath.Join(dir, "acct-1", "*.jsonl"))
	if len(names) != 1 {
		t.Fatalf("%d transcripts, want 1", len(names))
	}
	r := replaying(t, names[0])
	got := runTurn(t, connect(t, r, Config{}), &turn)
	if got.err != nil || got.text != want.text || got.done.SessionID != want.done.SessionID {
		t.Errorf("replayed %q in %s (%v), recorded %q in %s", got.text, got.done.SessionID, got.err, want.text, want.done.SessionID)
	}
	if st := replayed(t, r); !st.Done || st.Mismatch != "" {
		t.Errorf("replay %+v, want all played", st)
	}
}
