package hostile_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/testenv"
)

// chatAnswer sends a non-streamed chat with the user key and returns its
// status and text.
func chatAnswer(t *testing.T, d *testenv.Daemon, prompt string) (int, string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"model": "m", "messages": []map[string]string{{"role": "user", "content": prompt}}})
	code, body := send(t, d, hostileCase{method: "POST", path: "/v1/chat/completions", header: jsonHeader, body: fixed(string(b))})
	var out struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal(body, &out) != nil || len(out.Choices) == 0 {
		return code, string(body)
	}
	return code, out.Choices[0].Message.Content
}

// TestSimDirectivesAreTheOperators: on a simulated pool as it runs by
// default (sim_directives off), a user key's prompt cannot crash a worker,
// log it out, read its environment or size its answer: the directives are
// text. Before, any key did all of that ([[sim:crash]] restarted every
// worker of the pool). With the setting on (the tests'), an answer's size
// is bounded all the same.
func TestSimDirectivesAreTheOperators(t *testing.T) {
	d := testenv.StartDaemon(t, "POOLGATE_API_KEYS="+apiKey, "POOLGATE_ADMIN_TOKEN="+adminToken,
		"POOLGATE_SIM_DIRECTIVES=false", "POOLGATE_HEALTH_INTERVAL=300ms")
	d.WaitReady(t, 20*time.Second)
	before := allReady(t, d)
	for _, prompt := range []string{"a [[sim:crash]]", "b [[sim:logout]]", "c [[sim:env]]", "d [[sim:words=100000]]"} {
		code, text := chatAnswer(t, d, prompt)
		if code != 200 || text != "You said: "+prompt[:1] {
			t.Errorf("%q: %d %q, want 200 and the plain echo", prompt, code, clip([]byte(text)))
		}
	}
	time.Sleep(time.Second) // three health checks: a crashed or logged-out worker shows
	for name, was := range before {
		if now := instances(t, d)[name]; now != was {
			t.Errorf("instance %s is now %+v, was %+v", name, now, was)
		}
	}

	on := testenv.StartDaemon(t, "POOLGATE_API_KEYS="+apiKey, "POOLGATE_ADMIN_TOKEN="+adminToken, "POOLGATE_SIM_DIRECTIVES=true")
	on.WaitReady(t, 20*time.Second)
	code, text := chatAnswer(t, on, "e [[sim:words=1000000]]")
	if n := len(strings.Fields(text)); code != 200 || n > 10000 {
		t.Errorf("[[sim:words=1000000]]: %d, %d words; want 200 and at most 10,000", code, n)
	}
}
