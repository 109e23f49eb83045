package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// simAccounts configures n simulated accounts that start logged in; extra
// holds per-account arguments by index.
func simAccounts(n int, extra map[int][]string) []string {
	var accts []map[string]any
	for i := range n {
		a := map[string]any{"name": fmt.Sprintf("acct-%d", i+1), "username": fmt.Sprintf("u%d", i+1), "password": "pw"}
		if args, ok := extra[i]; ok {
			a["args"] = args
		}
		accts = append(accts, a)
	}
	b, _ := json.Marshal(accts)
	return []string{"POOLGATE_ACCOUNTS=" + string(b), "POOLGATE_WORKER_ARGS=--logged-in",
		"POOLGATE_HEALTH_INTERVAL=200ms", "POOLGATE_BACKOFF_MAX=1s"}
}

func readyInstances(t *testing.T, d *daemontest.Daemon) []route.InstanceStatus {
	var ready []route.InstanceStatus
	for _, in := range poolState(t, d, "").Instances {
		if in.State == supervisor.StateReady && in.PID > 0 {
			ready = append(ready, in)
		}
	}
	return ready
}

func waitAllReady(t *testing.T, d *daemontest.Daemon, n int, within time.Duration) []route.InstanceStatus {
	t.Helper()
	var ready []route.InstanceStatus
	testenv.WaitForNoError(t, within, fmt.Sprintf("%d ready instances", n), func() error {
		if ready = readyInstances(t, d); len(ready) == n {
			return nil
		}
		return fmt.Errorf("instances %+v", poolState(t, d, "").Instances)
	})
	return ready
}

func chatParams(prompt string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}}
}

func TestChaosKilledWorkers(t *testing.T) {
	d := daemontest.StartDaemon(t, simAccounts(3, nil)...)
	waitAllReady(t, d, 3, 15*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := sdk(d, "x")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var ok, cut, lost atomic.Int32
	const prompt = "chaos [[sim:chunk-delay=15ms]] [[sim:words=12]]"
	for i := range 6 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				// Non-streaming: it succeeds, unless its worker died after
				// the turn reached it: the turn may have been what killed
				// it, and is not risked on a second worker (a turn sent to
				// a worker already dead is retried). Each kill can cost at
				// most the one turn its worker held.
				if i%2 == 0 {
					resp, err := client.Chat.Completions.New(ctx, chatParams(prompt))
					var apiErr *openai.Error
					if errors.As(err, &apiErr) && apiErr.StatusCode == http.StatusBadGateway && apiErr.Code == "worker_gone" {
						lost.Add(1)
						continue
					}
					if err != nil {
						t.Errorf("non-stream request failed: %v", err)
						return
					}
					if !strings.HasPrefix(resp.Choices[0].Message.Content, "You said: chaos") {
						t.Errorf("answer %q", resp.Choices[0].Message.Content)
					}
					ok.Add(1)
					continue
				}
				// Streaming: complete, or ended by an error the SDK sees; never
				// silently truncated.
				stream := client.Chat.Completions.NewStreaming(ctx, chatParams(prompt))
				var acc openai.ChatCompletionAccumulator
				for stream.Next() {
					acc.AddChunk(stream.Current())
				}
				switch {
				case stream.Err() != nil:
					cut.Add(1)
				case len(acc.Choices) == 0 || len(strings.Fields(acc.Choices[0].Message.Content)) != 12:
					t.Errorf("stream ended cleanly but incomplete: %+v", acc.Choices)
				default:
					ok.Add(1)
				}
			}
		})
	}
	kills := 0
	for range 6 {
		time.Sleep(600 * time.Millisecond)
		if r := readyInstances(t, d); len(r) >= 2 {
			victim := r[rand.IntN(len(r))]
			if syscall.Kill(victim.PID, syscall.SIGKILL) == nil {
				kills++
			}
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d kills, %d requests succeeded, %d streams cut with an error, %d non-stream turns lost with their worker",
		kills, ok.Load(), cut.Load(), lost.Load())
	if kills == 0 || ok.Load() == 0 {
		t.Fatalf("the test did not exercise anything: %d kills, %d successes", kills, ok.Load())
	}
	if int(lost.Load()) > kills {
		t.Errorf("%d non-stream turns lost with their worker, more than the %d kills", lost.Load(), kills)
	}
	waitAllReady(t, d, 3, 15*time.Second)
}

func TestDefaultsLetABurstThrough(t *testing.T) {
	d := daemontest.StartDaemon(t)
	waitAllReady(t, d, 2, 15*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := sdk(d, "x")
	var wg sync.WaitGroup
	var failed atomic.Int32
	for range 40 {
		wg.Go(func() {
			if _, err := client.Chat.Completions.New(ctx, chatParams("burst [[sim:delay=300ms]]")); err != nil {
				failed.Add(1)
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d of 40 requests failed", failed.Load())
	}
}

func TestSaturationGets429WithRetryAfter(t *testing.T) {
	d := daemontest.StartDaemon(t, "POOLGATE_MAX_IN_FLIGHT=1", "POOLGATE_MAX_QUEUE=1", "POOLGATE_QUEUE_TIMEOUT=10s")
	waitAllReady(t, d, 2, 15*time.Second)
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for range 10 {
		wg.Go(func() {
			body := `{"model":"m","messages":[{"role":"user","content":"sat [[sim:delay=500ms]]"}]}`
			resp, err := http.Post(d.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			mu.Lock()
			codes[resp.StatusCode]++
			mu.Unlock()
			if resp.StatusCode == http.StatusTooManyRequests {
				ra, err := strconv.Atoi(resp.Header.Get("Retry-After"))
				if err != nil || ra < 1 {
					t.Errorf("429 with Retry-After %q", resp.Header.Get("Retry-After"))
				}
				var eb errorBody
				if json.Unmarshal(b, &eb) != nil || eb.Error["type"] == nil {
					t.Errorf("429 body not in the OpenAI error shape: %s", b)
				}
			}
		})
	}
	wg.Wait()
	if codes[200]+codes[429] != 10 || codes[200] < 2 || codes[429] < 1 {
		t.Errorf("status counts %v: want only 200s and 429s, with one running and one queued request served", codes)
	}
	if v := scrape(t, d, "poolgate_backpressure_rejections_total"); int(v) != codes[429] {
		t.Errorf("rejections metric %v, want %d", v, codes[429])
	}
}

func TestRateLimitedInstanceCoolsDownAndComesBack(t *testing.T) {
	d := daemontest.StartDaemon(t, simAccounts(2, map[int][]string{0: {"--ratelimit-every=1"}})...)
	waitAllReady(t, d, 2, 15*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := sdk(d, "x")
	cooled := false
	for i := range 6 {
		if _, err := client.Chat.Completions.New(ctx, chatParams(fmt.Sprintf("q%d", i))); err != nil {
			t.Fatalf("request %d failed although acct-2 serves: %v", i, err)
		}
		if in := poolState(t, d, "").Instances[0]; in.CooldownUntil != nil {
			cooled = true
		}
	}
	if !cooled {
		t.Fatal("acct-1 never showed a cooldown in /internal/pool")
	}
	if scrape(t, d, "poolgate_cooldowns_total") < 1 {
		t.Error("poolgate_cooldowns_total did not count the cooldown")
	}
	// With no traffic it returns by itself once the hinted 1s is over.
	testenv.WaitForNoError(t, 10*time.Second, "acct-1 back in rotation", func() error {
		if in := poolState(t, d, "").Instances[0]; in.CooldownUntil != nil || in.State != supervisor.StateReady {
			return fmt.Errorf("still out of rotation: %+v", in)
		}
		return nil
	})
}

func TestClientDisconnectFreesTheSlot(t *testing.T) {
	d := daemontest.StartDaemon(t, simAccounts(1, nil)...)
	waitAllReady(t, d, 1, 15*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"long [[sim:chunk-delay=200ms]] [[sim:words=100]]"}]}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.URL+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	for n := 0; n < 2 && sc.Scan(); {
		if strings.HasPrefix(sc.Text(), "data: ") {
			n++
		}
	}
	if in := poolState(t, d, "").Instances[0]; in.InFlight != 1 {
		t.Fatalf("in_flight %d during the stream", in.InFlight)
	}
	cancel()
	resp.Body.Close()
	start := time.Now()
	for poolState(t, d, "").Instances[0].InFlight != 0 {
		if time.Since(start) > 2*time.Second {
			t.Fatal("slot still held 2s after the client went away")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The instance serves the next request right away.
	c2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	client := sdk(d, "x")
	if _, err := client.Chat.Completions.New(c2, chatParams("next")); err != nil {
		t.Fatal(err)
	}
}

var fixedMetrics = []string{
	"poolgate_requests_total", "poolgate_request_duration_seconds", "poolgate_time_to_first_token_seconds",
	"poolgate_tokens_total", "poolgate_in_flight", "poolgate_queue_depth", "poolgate_queue_wait_seconds",
	"poolgate_backpressure_rejections_total", "poolgate_retries_total", "poolgate_cooldowns_total",
	"poolgate_instances", "poolgate_instance_in_flight", "poolgate_instance_restarts_total",
	"poolgate_session_cache_hits_total", "poolgate_session_cache_misses_total",
	"poolgate_session_cache_invalidations_total", "poolgate_store_errors_total", "poolgate_cluster_handovers_total",
	"poolgate_redis_up", "poolgate_affinity_held", "poolgate_accounting_held", "poolgate_accounting_dropped_total",
	"poolgate_follow_ups_total", "poolgate_follow_ups_reused_total",
}

func TestMetricsContract(t *testing.T) {
	d := daemontest.StartDaemon(t, "POOLGATE_API_KEYS=sk-1", "POOLGATE_METRICS_TOKEN=mt", "POOLGATE_ADMIN_TOKEN=adm")
	testenv.WaitFor(t, 15*time.Second, "two ready instances", func() bool {
		var s route.Snapshot
		req, _ := http.NewRequest(http.MethodGet, d.URL+"/internal/pool", nil)
		req.Header.Set("Authorization", "Bearer adm")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&s)
			resp.Body.Close()
		}
		return len(s.Instances) == 2 && s.Instances[0].State == supervisor.StateReady && s.Instances[1].State == supervisor.StateReady
	})
	get := func(token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, d.URL+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.Header.Get("X-Request-Id") == "" {
			t.Error("/metrics answer without x-request-id")
		}
		return resp.StatusCode, string(b)
	}
	if code, _ := get("sk-1"); code != http.StatusForbidden {
		t.Errorf("a user key on /metrics: %d, want 403", code)
	}
	if code, _ := get(""); code != http.StatusUnauthorized {
		t.Errorf("no token on /metrics: %d, want 401", code)
	}
	code, body := get("mt")
	if code != http.StatusOK {
		t.Fatalf("metrics token: %d", code)
	}
	for _, name := range fixedMetrics {
		typ := "gauge"
		switch {
		case strings.HasSuffix(name, "_total"):
			typ = "counter"
		case strings.HasSuffix(name, "_seconds"):
			typ = "histogram"
		}
		if !strings.Contains(body, "# TYPE "+name+" "+typ+"\n") {
			t.Errorf("%s is not exported as a %s", name, typ)
		}
	}
	sum := 0.0
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "poolgate_instances{") {
			f, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			sum += f
		}
	}
	if sum != 2 {
		t.Errorf("sum of poolgate_instances = %v, want 2 (the instances in /internal/pool)", sum)
	}
}
