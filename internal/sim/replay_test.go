package sim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReplay: setup calls are answered from the transcript whenever they
// come; the client's other messages must follow it, each answered as
// recorded; a wrong one, or one past the end, is a JSON-RPC error naming
// what differs, and ends the replay.
func TestReplay(t *testing.T) {
	file := filepath.Join(t.TempDir(), "t.jsonl")
	lines := []string{
		`{"transcript":"lingma","version":1}`,
		`{"dir":"send","msg":{"jsonrpc":"2.0","id":1,"method":"auth/status","params":{}}}`,
		`{"dir":"recv","msg":{"jsonrpc":"2.0","id":1,"result":{"status":2,"id":"<redacted>"}}}`,
		`{"dir":"send","msg":{"jsonrpc":"2.0","id":7,"method":"chat/deleteSessionById","params":{"sessionId":"s-1","at":"<redacted>"}}}`,
		`{"dir":"recv","msg":{"jsonrpc":"2.0","id":7,"result":{"success":true}}}`,
		`{"dir":"send","msg":{"jsonrpc":"2.0","id":8,"method":"chat/deleteSessionById","params":{"sessionId":"s-2","startTime":5}}}`,
		`{"dir":"recv","msg":{"jsonrpc":"2.0","id":8,"result":{"success":true}}}`,
	}
	if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	h := startSim(t, "--replay="+file)
	c := dial(t, h)
	var st authStatus
	for range 2 { // a health check may come any time
		c.result("auth/status", map[string]any{}, &st)
	}
	var ok struct{ Success bool }
	c.result("chat/deleteSessionById", map[string]any{"sessionId": "s-1", "at": "anything"}, &ok)
	if st.Status != 2 || !ok.Success {
		t.Fatalf("auth/status %+v, delete %+v: want the recorded answers", st, ok)
	}
	m := c.call("chat/deleteSessionById", map[string]any{"sessionId": "s-3", "startTime": 9})
	if m.Error == nil || !strings.Contains(m.Error.Message, `replay mismatch at message 3: params.sessionId: want "s-2", got "s-3"`) {
		t.Errorf("a wrong message: %+v, want the difference named", m.Error)
	}
	if m := c.call("chat/stop", map[string]any{}); m.Error == nil || !strings.Contains(m.Error.Message, "replay mismatch") {
		t.Errorf("after a mismatch: %+v, want the replay over", m.Error)
	}
	if r := h.stats(t).Replay; r == nil || r.Played != 2 || r.Steps != 4 || r.Done || r.Mismatch == "" {
		t.Errorf("replay stats %+v", r)
	}
}
