package hostile_test

import (
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/testenv"
)

// instance is what the poison cases read of /internal/pool.
type instance struct {
	Name     string `json:"name"`
	State    string `json:"state"`
	PID      int    `json:"pid"`
	Restarts int    `json:"restarts"`
}

func instances(t *testing.T, d *daemontest.Daemon) map[string]instance {
	t.Helper()
	var snap struct {
		Instances []instance `json:"instances"`
	}
	d.GetJSON(t, "/internal/pool", adminToken, &snap)
	out := map[string]instance{}
	for _, in := range snap.Instances {
		out[in.Name] = in
	}
	return out
}

// allReady waits until every instance is ready and returns them.
func allReady(t *testing.T, d *daemontest.Daemon) map[string]instance {
	t.Helper()
	var ins map[string]instance
	testenv.WaitFor(t, 20*time.Second, "every instance ready", func() bool {
		ins = instances(t, d)
		for _, in := range ins {
			if in.State != "ready" {
				return false
			}
		}
		return len(ins) > 0
	})
	return ins
}

// TestPoisonTurnsKeepTheWorkers sends the turns of issue 35 that used to
// take every worker down: within max_body_bytes, but larger than a worker
// takes once encoded for it. Each is refused with 413 in its protocol
// before any worker sees it: afterwards every worker is still ready, the
// same process, never restarted, and no turn was retried on a second one.
func TestPoisonTurnsKeepTheWorkers(t *testing.T) {
	d := daemontest.StartDaemon(t, "POOLGATE_API_KEYS="+apiKey, "POOLGATE_ADMIN_TOKEN="+adminToken,
		"POOLGATE_HEALTH_INTERVAL=300ms")
	d.WaitReady(t, 20*time.Second)
	json := map[string]string{"Content-Type": "application/json"}
	anth := map[string]string{"Content-Type": "application/json", "anthropic-version": "2023-06-01"}
	// 16,776,992 bytes in all: under the 16 MiB body cap by 224 bytes.
	const plainHead, plainTail = `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"`, `"}]}`
	plain := plainHead + strings.Repeat("a", 16776992-len(plainHead)-len(plainTail)) + plainTail
	tests := []hostileCase{
		// 6 MiB of invalid UTF-8 decode into 18 MiB of U+FFFD, which
		// chat/ask carries twice.
		{"6 MiB of invalid UTF-8 in a message", "POST", "/v1/chat/completions", json,
			fixed(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("\xff", 6<<20) + `"}]}`),
			false, 413, openAI, 5 * time.Second, 2 * time.Second},
		{"a plain body of 16,776,992 bytes", "POST", "/v1/messages", anth, fixed(plain), false, 413, anthropic,
			5 * time.Second, 2 * time.Second},
	}
	if len(plain) != 16776992 {
		t.Fatalf("the plain body is %d bytes", len(plain))
	}
	before, retries := allReady(t, d), metric(t, d, "poolgate_retries_total")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cpu0, start := cpuTime(t, d.Pid()), time.Now()
			code, body := send(t, d, tt)
			wall, cpu := time.Since(start), cpuTime(t, d.Pid())-cpu0
			if code != tt.wantStatus || !hasShape(body, tt.shape) {
				t.Errorf("answer %d %s, want %d in the protocol's error shape", code, clip(body), tt.wantStatus)
			}
			if wall > tt.wall || cpu > tt.cpu {
				t.Errorf("took %s and %s of CPU, bounds %s and %s", wall, cpu, tt.wall, tt.cpu)
			}
			time.Sleep(time.Second) // three health checks: a dropped connection shows
			for name, was := range before {
				if now := instances(t, d)[name]; now != was {
					t.Errorf("instance %s is now %+v, was %+v", name, now, was)
				}
			}
			if got := metric(t, d, "poolgate_retries_total"); got != retries {
				t.Errorf("%v retries on another instance, want none", got-retries)
			}
		})
	}
	if code, body := send(t, d, hostileCase{method: "POST", path: "/v1/chat/completions", header: json, body: chat("")}); code != 200 {
		t.Errorf("after the poison turns: %d %s", code, clip(body))
	}
}

// TestPoisonKillsNoSecondWorker lifts the bound above what the simulated
// workers take, so the poison turn reaches one: that worker drops its
// connection (and is restarted), but the turn is not tried on another,
// which stays as it was. The client gets a 502.
func TestPoisonKillsNoSecondWorker(t *testing.T) {
	d := daemontest.StartDaemon(t, "POOLGATE_API_KEYS="+apiKey, "POOLGATE_ADMIN_TOKEN="+adminToken,
		"POOLGATE_HEALTH_INTERVAL=300ms", "POOLGATE_WORKER_MAX_TURN_BYTES=67108864")
	d.WaitReady(t, 20*time.Second)
	before, retries := allReady(t, d), metric(t, d, "poolgate_retries_total")
	code, body := send(t, d, hostileCase{method: "POST", path: "/v1/chat/completions",
		header: map[string]string{"Content-Type": "application/json"},
		body:   fixed(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("\xff", 6<<20) + `"}]}`)})
	if code != 502 || !hasShape(body, openAI) {
		t.Errorf("answer %d %s, want 502 in OpenAI's error shape", code, clip(body))
	}
	time.Sleep(time.Second)
	untouched := 0
	for name, was := range before {
		if instances(t, d)[name] == was {
			untouched++
		}
	}
	if untouched != len(before)-1 {
		t.Errorf("%d of %d instances untouched (%+v, were %+v), want all but the one that took the turn",
			untouched, len(before), instances(t, d), before)
	}
	if got := metric(t, d, "poolgate_retries_total"); got != retries {
		t.Errorf("%v retries on another instance, want none", got-retries)
	}
}
