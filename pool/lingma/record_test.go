package lingma

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/lingmarpc"
	"github.com/poolgate/poolgate/pool/worker/workertest"
)

// readTranscripts reads every transcript in dir, oldest first.
func readTranscripts(t *testing.T, dir string) ([]*lingmarpc.Transcript, []string) {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	slices.Sort(names)
	var out []*lingmarpc.Transcript
	var raw []string
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := lingmarpc.ReadTranscript(strings.NewReader(string(b)))
		if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
		out, raw = append(out, tr), append(raw, string(b))
	}
	return out, raw
}

// methodsOf lists a transcript's messages as "dir method" (answers as
// "dir result").
func methodsOf(tr *lingmarpc.Transcript) []string {
	var out []string
	for _, e := range tr.Entries {
		m, _ := lingmarpc.Decode(e.Msg)
		what := m.Method
		if what == "" {
			what = "result"
		}
		out = append(out, e.Dir+" "+what)
	}
	return out
}

// TestRecord: with recording on, each turn leaves a transcript that starts
// with the connection's setup exchanges and holds every message of the
// turn, in order, with the prompt and the account's identity redacted.
func TestRecord(t *testing.T) {
	w := startSim(t, "--logged-in")
	dir := t.TempDir()
	c := connect(t, w, Config{Record: RecordConfig{All: true, Dir: dir, Keep: 2}})
	if _, err := c.Status(context.Background()); err != nil {
		t.Fatal(err)
	}
	secret := "the launch code is 1234"
	a := runTurn(t, c, &chat.Turn{RequestID: "r", Messages: user(secret)})
	if a.err != nil {
		t.Fatal(a.err)
	}
	trs, raw := readTranscripts(t, filepath.Join(dir, "acct-1"))
	if len(trs) != 1 {
		t.Fatalf("%d transcripts, want 1", len(trs))
	}
	want := []string{"send initialize", "recv result", "send auth/status", "recv result",
		"send chat/ask", "recv result",
		"recv chat/process_step_callback", "send result", "recv session/title/update", "send result",
		"recv chat/answer", "send result", "recv chat/answer", "send result", "recv chat/answer", "send result",
		"recv chat/answer", "send result", "recv chat/answer", "send result", "recv chat/answer", "send result",
		"recv chat/answer", "send result",
		"recv chat/process_step_callback", "send result", "recv chat/finish", "send result"}
	if got := methodsOf(trs[0]); !slices.Equal(got, want) {
		t.Errorf("transcript holds\n%q\nwant\n%q", got, want)
	}
	// The answers stay (the simulator's echoes the prompt); what the
	// gateway sent does not.
	ask := string(trs[0].Entries[4].Msg)
	if strings.Contains(ask, "launch") || !strings.Contains(ask, "<redacted:prompt 23 bytes>") ||
		strings.Contains(raw[0], `"name":"demo"`) || !strings.Contains(string(trs[0].Entries[3].Msg), `"id":"<redacted>"`) {
		t.Errorf("the transcript shows the prompt or the account:\n%s", raw[0])
	}
	// Only the newest Keep transcripts stay.
	for _, q := range []string{"two", "three"} {
		runTurn(t, c, &chat.Turn{Messages: user(q)})
	}
	if trs, _ = readTranscripts(t, filepath.Join(dir, "acct-1")); len(trs) != 2 {
		t.Errorf("%d transcripts kept, want 2", len(trs))
	}
}

// TestRecordOneAccount: an account that asks for it records into its own
// work dir; the others record nothing.
func TestRecordOneAccount(t *testing.T) {
	w := startSim(t, "--logged-in")
	ep := w.Endpoint
	ep.Account.Record = true
	c := workertest.Connect[*Client](t, New(Config{}), ep, wait)
	runTurn(t, c, &chat.Turn{Messages: user("hi")})
	if trs, _ := readTranscripts(t, filepath.Join(ep.WorkDir, "transcripts")); len(trs) != 1 {
		t.Errorf("%d transcripts in the work dir, want 1", len(trs))
	}
	other := startSim(t, "--logged-in")
	runTurn(t, connect(t, other, Config{}), &chat.Turn{Messages: user("hi")})
	if _, err := os.Stat(filepath.Join(other.Endpoint.WorkDir, "transcripts")); !os.IsNotExist(err) {
		t.Errorf("an account that did not ask recorded: %v", err)
	}
}
