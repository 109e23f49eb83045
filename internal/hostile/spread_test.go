package hostile_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/testenv"
)

// Issue 45's poison turns: turns that break the worker that took them,
// after it took them (acknowledged the ask, sent its response headers). An
// acknowledgement shows the worker parsed the turn, not that it survived
// it, so such a turn used to be tried on the next worker, and the next:
// every worker of the pool restarted for one request. Now a turn whose
// worker died (or went silent) after receiving it is tried on no other:
// one worker is restarted, the client gets one error in its protocol.

// threeAccounts is a pool of three accounts a1..a3.
const threeAccounts = `POOLGATE_ACCOUNTS=[{"name":"a1","username":"u1","password":"pw"},` +
	`{"name":"a2","username":"u2","password":"pw"},{"name":"a3","username":"u3","password":"pw"}]`

// poisonCase is one request that breaks the worker taking it.
type poisonCase struct {
	name   string
	path   string
	header map[string]string
	body   string
	shape  shape
}

// breaksOne sends each case and checks that it broke exactly one worker,
// was tried on no other, and was answered with one error in its protocol.
func breaksOne(t *testing.T, d *daemontest.Daemon, tests []poisonCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, retries := allReady(t, d), metric(t, d, "poolgate_retries_total")
			start := time.Now()
			code, body := send(t, d, hostileCase{method: "POST", path: tt.path, header: tt.header, body: fixed(tt.body)})
			if code < 500 || !hasShape(body, tt.shape) {
				t.Errorf("answer %d %s, want a 5xx in the protocol's error shape", code, clip(body))
			}
			if wall := time.Since(start); wall > 10*time.Second {
				t.Errorf("answered after %s", wall)
			}
			changed := func(after map[string]instance) int {
				n := 0
				for name, was := range before {
					if now := after[name]; now.PID != was.PID || now.Restarts != was.Restarts {
						n++
					}
				}
				return n
			}
			testenv.WaitFor(t, 20*time.Second, "the broken worker restarted", func() bool {
				return changed(allReady(t, d)) > 0
			})
			time.Sleep(time.Second) // three health checks: any other broken worker shows
			if after := allReady(t, d); changed(after) != 1 {
				t.Errorf("%d of %d workers restarted (%+v, were %+v), want the one that took the turn", changed(after), len(before), after, before)
			}
			if got := metric(t, d, "poolgate_retries_total"); got != retries {
				t.Errorf("%v retries on another worker, want none", got-retries)
			}
		})
	}
}

// TestPoisonTurnBreaksOneSimulatedWorker: on the simulator (the Lingma
// driver), a non-streamed [[sim:crash]] (the worker exits after its first
// delta) and a 3 MB prompt of '<' (the simulator's echo escapes it to about
// 18 MB, over the gateway's own read limit, so the gateway drops the
// connection: the worker's fault for that turn) each restart one worker.
func TestPoisonTurnBreaksOneSimulatedWorker(t *testing.T) {
	d := daemontest.StartDaemon(t, "POOLGATE_API_KEYS="+apiKey, "POOLGATE_ADMIN_TOKEN="+adminToken, threeAccounts,
		"POOLGATE_WORKER_ARGS=--logged-in", "POOLGATE_HEALTH_INTERVAL=300ms", "POOLGATE_BACKOFF_MAX=500ms")
	d.WaitReady(t, 20*time.Second)
	lt := strings.Repeat("<", 3<<20)
	breaksOne(t, d, []poisonCase{
		{"non-streamed crash", "/v1/chat/completions", jsonHeader,
			`{"model":"m","messages":[{"role":"user","content":"boom [[sim:crash]]"}]}`, openAI},
		{"an answer over the read limit", "/v1/chat/completions", jsonHeader,
			`{"model":"m","messages":[{"role":"user","content":"` + lt + `"}]}`, openAI},
		{"an answer over the read limit, Anthropic", "/v1/messages", anthropicHeader,
			`{"model":"m","max_tokens":4096,"messages":[{"role":"user","content":"` + lt + `"}]}`, anthropic},
	})
}

// TestPoisonTurnBreaksOneModelServer: with the openai driver, a model
// server (this test binary, main_test.go) that sends its 200 headers and
// exits on one prompt, streamed and not, restarts one worker.
func TestPoisonTurnBreaksOneModelServer(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	d := daemontest.StartDaemon(t, "POOLGATE_API_KEYS="+apiKey, "POOLGATE_ADMIN_TOKEN="+adminToken, threeAccounts,
		"POOLGATE_DRIVER=openai", "POOLGATE_WORKER_BIN="+self, "POOLGATE_WORKER_ARGS="+modelServerArg+",--port={port}",
		"POOLGATE_HEALTH_INTERVAL=300ms", "POOLGATE_BACKOFF_MAX=500ms")
	d.WaitReady(t, 20*time.Second)
	breaksOne(t, d, []poisonCase{
		{"non-streamed", "/v1/chat/completions", jsonHeader,
			`{"model":"m","messages":[{"role":"user","content":"` + poisonExit + `"}]}`, openAI},
		{"streamed", "/v1/chat/completions", jsonHeader,
			`{"model":"m","stream":true,"messages":[{"role":"user","content":"` + poisonExit + `"}]}`, openAI},
		{"streamed Anthropic", "/v1/messages", anthropicHeader,
			`{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"` + poisonExit + `"}]}`, anthropic},
	})
}

// TestDeepToolSchemaIsRefused: tool parameters nested 9,993 deep pass
// encoding/json's own limit (10,000) in the gateway, but not in a worker
// that gets them inside its frame (native tools): the simulator dropped
// the frame and stayed silent, and each worker was held for the ask's 5 s
// in turn. Nesting is bounded where the body is decoded: 400 at once, no
// worker touched.
func TestDeepToolSchemaIsRefused(t *testing.T) {
	d := daemontest.StartDaemon(t, "POOLGATE_API_KEYS="+apiKey, "POOLGATE_ADMIN_TOKEN="+adminToken, threeAccounts,
		"POOLGATE_WORKER_ARGS=--logged-in,--native-tools", "POOLGATE_LINGMA_TOOL_MODE=native")
	d.WaitReady(t, 20*time.Second)
	const n = 9993
	deep := strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n)
	tests := []hostileCase{
		{"chat tool parameters", "POST", "/v1/chat/completions", jsonHeader,
			chat(`,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":` + deep + `}}}]`),
			false, 400, openAI, 5 * time.Second, time.Second},
		{"Anthropic input_schema", "POST", "/v1/messages", anthropicHeader,
			fixed(`{"model":"m","max_tokens":5,"messages":[` + chatMsg + `],"tools":[{"name":"f","input_schema":{"type":"object","properties":` + deep + `}}]}`),
			false, 400, anthropic, 5 * time.Second, time.Second},
		{"Responses tool parameters", "POST", "/v1/responses", jsonHeader,
			fixed(`{"model":"m","input":"hi","tools":[{"type":"function","name":"f","parameters":{"type":"object","properties":` + deep + `}}]}`),
			false, 400, openAI, 5 * time.Second, time.Second},
	}
	before := allReady(t, d)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			code, body := send(t, d, tt)
			if code != tt.wantStatus || !hasShape(body, tt.shape) {
				t.Errorf("answer %d %s, want %d in the protocol's error shape", code, clip(body), tt.wantStatus)
			}
			if wall := time.Since(start); wall > tt.wall {
				t.Errorf("answered after %s, bound %s", wall, tt.wall)
			}
		})
	}
	for name, was := range before {
		if now := instances(t, d)[name]; now != was {
			t.Errorf("instance %s is now %+v, was %+v", name, now, was)
		}
	}
}
