package hostile_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/testenv"
)

const (
	apiKey     = "sk-hostile"
	adminToken = "adm-hostile"
	bundleKey  = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=" // 32 bytes, base64
)

// shape is the error body a refusal must have.
type shape int

const (
	none      shape = iota // answered by the HTTP server itself, or a success
	openAI                 // {"error":{"message",...}}
	anthropic              // {"type":"error","error":{"type","message"}}
)

type hostileCase struct {
	name       string
	method     string
	path       string
	header     map[string]string
	body       func() []byte
	slow       bool // trickle the body, slower than the body timeout allows
	wantStatus int
	shape      shape
	wall, cpu  time.Duration // bounds of the whole answer and the daemon's CPU for it
}

func repeat(n int, s string) string {
	var b strings.Builder
	b.Grow(n * (len(s) + 1))
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(s)
	}
	return b.String()
}

// The headers of a JSON body, and of an Anthropic request.
var (
	jsonHeader      = map[string]string{"Content-Type": "application/json"}
	anthropicHeader = map[string]string{"Content-Type": "application/json", "anthropic-version": "2023-06-01"}
)

func fixed(s string) func() []byte { return func() []byte { return []byte(s) } }

const chatMsg = `{"role":"user","content":"hi"}`

func chat(extra string) func() []byte {
	return fixed(`{"model":"m","messages":[` + chatMsg + `]` + extra + `}`)
}

func cases() []hostileCase {
	json := map[string]string{"Content-Type": "application/json"}
	anth := map[string]string{"Content-Type": "application/json", "anthropic-version": "2023-06-01"}
	admin := map[string]string{"Authorization": "Bearer " + adminToken, "Content-Type": "application/json"}
	quick, heavy := 5*time.Second, 20*time.Second
	return []hostileCase{
		// Structure.
		{"deeply nested JSON", "POST", "/v1/chat/completions", json,
			fixed(`{"model":"m","messages":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`), false, 400, openAI, quick, time.Second},
		{"empty body", "POST", "/v1/chat/completions", json, fixed(""), false, 400, openAI, quick, time.Second},
		{"null body", "POST", "/v1/responses", json, fixed("null"), false, 400, openAI, quick, time.Second},
		{"array body", "POST", "/v1/messages", anth, fixed("[]"), false, 400, anthropic, quick, time.Second},
		{"scalar body", "POST", "/v1/chat/completions", json, fixed("42"), false, 400, openAI, quick, time.Second},
		{"raw NUL byte", "POST", "/v1/chat/completions", json, fixed("{\"model\":\x00\"m\"}"), false, 400, openAI, quick, time.Second},
		{"form body", "POST", "/v1/chat/completions", map[string]string{"Content-Type": "application/x-www-form-urlencoded"},
			fixed("model=m&messages=hi"), false, 400, openAI, quick, time.Second},
		// Counts.
		{"100k messages", "POST", "/v1/chat/completions", json,
			fixed(`{"model":"m","messages":[` + repeat(100000, chatMsg) + `]}`), false, 400, openAI, quick, 2 * time.Second},
		{"100k tools", "POST", "/v1/chat/completions", json,
			chat(`,"tools":[` + repeat(100000, `{"type":"function","function":{"name":"f"}}`) + `]`), false, 400, openAI, quick, 2 * time.Second},
		{"100k Responses items", "POST", "/v1/responses", json,
			fixed(`{"model":"m","input":[` + repeat(100000, `{"role":"user","content":"x"}`) + `]}`), false, 400, openAI, quick, 2 * time.Second},
		{"100k Anthropic tools", "POST", "/v1/messages", anth,
			fixed(`{"model":"m","max_tokens":5,"messages":[` + chatMsg + `],"tools":[` + repeat(100000, `{"name":"f","input_schema":{}}`) + `]}`), false, 400, anthropic, quick, 2 * time.Second},
		{"200k Anthropic stop sequences", "POST", "/v1/messages", anth,
			fixed(`{"model":"m","max_tokens":5,"messages":[` + chatMsg + `],"stop_sequences":[` + repeat(200000, `"zz"`) + `]}`), false, 400, anthropic, quick, 2 * time.Second},
		{"5 OpenAI stop sequences", "POST", "/v1/chat/completions", json, chat(`,"stop":["a","b","c","d","e"]`), false, 400, openAI, quick, time.Second},
		// Work that must stay linear: 20,000 calls and 20,000 results whose ids
		// never match, in both protocols that name results by their call.
		{"20k mismatched Responses tool ids", "POST", "/v1/responses", json, func() []byte {
			var b strings.Builder
			b.WriteString(`{"model":"m","input":[`)
			for i := range 20000 {
				fmt.Fprintf(&b, `{"type":"function_call","call_id":"c%d","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"x%d","output":"r"},`, i, i)
			}
			b.WriteString(`{"role":"user","content":"done?"}]}`)
			return []byte(b.String())
		}, false, 200, none, heavy, 8 * time.Second},
		{"20k mismatched Anthropic tool ids", "POST", "/v1/messages", anth, func() []byte {
			var uses, results strings.Builder
			for i := range 20000 {
				if i > 0 {
					uses.WriteByte(',')
					results.WriteByte(',')
				}
				fmt.Fprintf(&uses, `{"type":"tool_use","id":"t%d","name":"f","input":{}}`, i)
				fmt.Fprintf(&results, `{"type":"tool_result","tool_use_id":"x%d","content":"r"}`, i)
			}
			return []byte(`{"model":"m","max_tokens":50,"messages":[` + chatMsg + `,{"role":"assistant","content":[` + uses.String() +
				`]},{"role":"user","content":[` + results.String() + `,{"type":"text","text":"done?"}]}]}`)
		}, false, 200, none, heavy, 8 * time.Second},
		{"count_tokens of 15 MB", "POST", "/v1/messages/count_tokens", anth, func() []byte {
			return []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("lorem ipsum ", 15<<20/12) + `"}]}`)
		}, false, 200, none, heavy, 8 * time.Second},
		// Values.
		{"invalid UTF-8 in content", "POST", "/v1/chat/completions", json, fixed("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"a\xff\xfe b\"}]}"), false, 200, none, quick, time.Second},
		{"escaped NUL in content", "POST", "/v1/chat/completions", json, chat(`,"user":"a\u0000b"`), false, 200, none, quick, time.Second},
		{"max_tokens out of int range", "POST", "/v1/chat/completions", json, chat(`,"max_tokens":1e30`), false, 400, openAI, quick, time.Second},
		{"temperature overflowing float64", "POST", "/v1/chat/completions", json, chat(`,"temperature":1e400`), false, 400, openAI, quick, time.Second},
		{"negative max_output_tokens", "POST", "/v1/responses", json, fixed(`{"model":"m","input":"x","max_output_tokens":-1}`), false, 400, openAI, quick, time.Second},
		{"n=2", "POST", "/v1/chat/completions", json, chat(`,"n":2`), false, 400, openAI, quick, time.Second},
		// Size and time.
		{"body over the cap", "POST", "/v1/chat/completions", json, func() []byte { return make([]byte, 16<<20+1) }, false, 413, openAI, quick, time.Second},
		{"slow body", "POST", "/v1/chat/completions", json, chat(""), true, 408, openAI, quick, time.Second},
		{"slow Anthropic body", "POST", "/v1/messages", anth, fixed(`{"model":"m","max_tokens":5,"messages":[` + chatMsg + `]}`), true, 408, anthropic, quick, time.Second},
		{"slow Responses body", "POST", "/v1/responses", json, fixed(`{"model":"m","input":"hi"}`), true, 408, openAI, quick, time.Second},
		{"slow admin body", "POST", "/internal/session/import?instance=sim-1", admin, fixed(`{"bundle":"AAAAAAAAAAAAAAAAAAAA"}`), true, 408, openAI, quick, time.Second},
		{"oversized headers", "GET", "/v1/models", map[string]string{"X-Junk": strings.Repeat("a", 2<<20)}, nil, false, 431, none, quick, time.Second},
		{"unsane request id", "POST", "/v1/chat/completions", map[string]string{"Content-Type": "application/json", "X-Request-Id": strings.Repeat("id", 300)},
			chat(""), false, 200, none, quick, time.Second},
		// Names that become paths or Redis keys.
		{"traversal in a response id", "GET", "/v1/responses/..%2F..%2Fetc%2Fpasswd", nil, nil, false, 404, openAI, quick, time.Second},
		{"traversal in previous_response_id", "POST", "/v1/responses", json, fixed(`{"model":"m","input":"x","previous_response_id":"../../poolgate:lease:acct-1"}`), false, 404, openAI, quick, time.Second},
		{"traversal in an instance name", "POST", "/internal/pool/..%2F..%2Fetc/restart", admin, nil, false, 404, openAI, quick, time.Second},
		{"traversal in an import", "POST", "/internal/session/import?instance=../../etc", admin, fixed(`{"bundle":"AAAA"}`), false, 404, openAI, quick, time.Second},
		{"traversal in a screenshot", "GET", "/internal/auto-login/..%2F..%2Fetc%2Fpasswd/screenshot", admin, nil, false, 404, openAI, quick, time.Second},
		{"traversal in models/raw", "GET", "/internal/models/raw?instance=../../x", admin, nil, false, 404, openAI, quick, time.Second},
	}
}

// TestHostileInputs runs every case against one daemon, then checks that
// nothing leaked and the daemon still serves.
func TestHostileInputs(t *testing.T) {
	redis := testenv.Redis(t)
	d := daemontest.StartDaemon(t, "POOLGATE_API_KEYS="+apiKey, "POOLGATE_ADMIN_TOKEN="+adminToken, "POOLGATE_BODY_TIMEOUT=2s",
		"POOLGATE_REDIS_URL="+redis.URL(), "POOLGATE_BUNDLE_KEY="+bundleKey)
	d.WaitReady(t, 20*time.Second)
	if code, _ := send(t, d, hostileCase{method: "POST", path: "/v1/chat/completions",
		header: map[string]string{"Content-Type": "application/json"}, body: chat("")}); code != 200 {
		t.Fatalf("warm-up request: %d", code)
	}
	goroutines, children := metric(t, d, "go_goroutines"), childProcesses(d.Pid())
	for _, tt := range cases() {
		t.Run(tt.name, func(t *testing.T) {
			cpu0, start := cpuTime(t, d.Pid()), time.Now()
			code, body := send(t, d, tt)
			wall, cpu := time.Since(start), cpuTime(t, d.Pid())-cpu0
			if code != tt.wantStatus {
				t.Errorf("status %d (%s), want %d", code, clip(body), tt.wantStatus)
			}
			if !hasShape(body, tt.shape) {
				t.Errorf("body %s is not the protocol's error", clip(body))
			}
			if wall > tt.wall || cpu > tt.cpu {
				t.Errorf("took %s and %s of CPU, bounds %s and %s", wall, cpu, tt.wall, tt.cpu)
			}
		})
	}
	testenv.WaitFor(t, 15*time.Second, "goroutines back to where they were", func() bool {
		return metric(t, d, "go_goroutines") <= goroutines+10
	})
	if got := childProcesses(d.Pid()); got != children {
		t.Errorf("%d child processes, %d before the suite", got, children)
	}
	if code, body := send(t, d, hostileCase{method: "POST", path: "/v1/chat/completions",
		header: map[string]string{"Content-Type": "application/json"}, body: chat("")}); code != 200 {
		t.Errorf("after the suite: %d %s", code, clip(body))
	}
	if strings.Contains(d.Log(), "panic") {
		t.Errorf("the daemon logged a panic:\n%s", d.Log())
	}
}

// send makes one request with the API key; a slow case trickles its body.
func send(t *testing.T, d *daemontest.Daemon, tt hostileCase) (int, []byte) {
	t.Helper()
	var body []byte
	if tt.body != nil {
		body = tt.body()
	}
	if tt.slow {
		return slowPost(t, d, tt.path, body)
	}
	req, err := http.NewRequest(tt.method, d.URL+tt.path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	for k, v := range tt.header {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", tt.method, tt.path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// slowPost announces the body's length and sends one byte a second.
func slowPost(t *testing.T, d *daemontest.Daemon, path string, body []byte) (int, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", d.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := apiKey
	if strings.HasPrefix(path, "/internal/") {
		key = adminToken
	}
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		path, d.Addr, key, len(body))
	answer := make(chan *http.Response, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			resp = nil
		}
		answer <- resp
	}()
	for i := 0; i < len(body); i++ {
		select {
		case resp := <-answer:
			if resp == nil {
				t.Fatal("no HTTP answer to a slow body")
			}
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, b
		case <-time.After(time.Second):
			_, _ = c.Write(body[i : i+1])
		}
	}
	t.Fatal("the whole slow body was read: no deadline held it")
	return 0, nil
}

func hasShape(body []byte, s shape) bool {
	switch s {
	case openAI:
		return bytes.HasPrefix(body, []byte(`{"error":{`)) && bytes.Contains(body, []byte(`"message":`))
	case anthropic:
		return bytes.HasPrefix(body, []byte(`{"type":"error","error":{"type":`))
	}
	return true
}

func clip(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

// cpuTime is the process's user+system CPU time from /proc.
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The command name may hold spaces; fields count from after its ")".
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

// childProcesses counts the processes whose parent is pid.
func childProcesses(pid int) int {
	ents, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			n++
		}
	}
	return n
}

// metric reads one unlabelled metric from /metrics.
func metric(t *testing.T, d *daemontest.Daemon, name string) float64 {
	t.Helper()
	v, err := scrape(d, name)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// scrape is metric for a goroutine other than the test's.
func scrape(d *daemontest.Daemon, name string) (float64, error) {
	req, _ := http.NewRequest(http.MethodGet, d.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("no metric %s", name)
}
