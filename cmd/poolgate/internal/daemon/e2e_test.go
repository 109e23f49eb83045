package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/chat"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/route"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// These tests run the real binary with its default pool: two simulated
// accounts served by `poolgate simworker` processes.

func sdk(d *daemontest.Daemon, key string) openai.Client {
	return openai.NewClient(option.WithBaseURL(d.URL+"/v1"), option.WithAPIKey(key), option.WithMaxRetries(0))
}

func poolState(t *testing.T, d *daemontest.Daemon, token string) route.Snapshot {
	t.Helper()
	var s route.Snapshot
	if code := d.GetJSON(t, "/internal/pool", token, &s); code != http.StatusOK {
		t.Fatalf("/internal/pool: %d", code)
	}
	return s
}

func TestDefaultPoolServesTheSDKAndShutsDownClean(t *testing.T) {
	d := daemontest.StartDaemon(t)
	d.WaitReady(t, 10*time.Second)
	var snap route.Snapshot
	testenv.WaitForNoError(t, 10*time.Second, "two ready instances with pids", func() error {
		snap = poolState(t, d, "")
		ready := 0
		for _, in := range snap.Instances {
			if in.State == supervisor.StateReady && in.PID > 0 {
				ready++
			}
		}
		if ready != 2 {
			return fmt.Errorf("instances %+v", snap.Instances)
		}
		return nil
	})

	// Workers never see poolgate's settings or secrets.
	env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", snap.Instances[0].PID))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(env), "POOLGATE_") {
		t.Error("a worker process inherited POOLGATE_ variables")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := sdk(d, "any")
	params := openai.ChatCompletionNewParams{
		Model:    "claude-sonnet-4-5", // unknown names map to the default model
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("be brief"), openai.UserMessage("hello pool")},
	}
	resp, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Choices[0].Message.Content; got != "You said: hello pool" || resp.Choices[0].FinishReason != "stop" {
		t.Errorf("non-stream: %q (%s)", got, resp.Choices[0].FinishReason)
	}
	if resp.Usage.PromptTokens == 0 || resp.Usage.CompletionTokens == 0 {
		t.Errorf("usage %+v, want token counts", resp.Usage)
	}
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	stream := client.Chat.Completions.NewStreaming(ctx, params)
	var acc openai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if got := acc.Choices[0].Message.Content; got != resp.Choices[0].Message.Content {
		t.Errorf("stream %q != non-stream %q", got, resp.Choices[0].Message.Content)
	}
	if acc.Usage.TotalTokens == 0 {
		t.Error("stream with include_usage carried no usage")
	}

	models, err := client.Models.List(ctx)
	if err != nil || len(models.Data) == 0 {
		t.Fatalf("models: %v, %v", models, err)
	}

	d.Stop(t, 15*time.Second)
	if err := d.ExitErr(); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
	for _, in := range snap.Instances {
		if err := syscall.Kill(-in.PID, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("worker group %d of %s survived shutdown", in.PID, in.Name)
		}
	}
}

// errorBody is the OpenAI error shape, and the admin API's; raw values tell
// "null" from "missing".
type errorBody struct {
	Error map[string]json.RawMessage `json:"error"`
}

func TestBadInputGetsItsStatusAndShape(t *testing.T) {
	d := daemontest.StartDaemon(t, "POOLGATE_API_KEYS=sk-1", "POOLGATE_MAX_BODY_BYTES=4096")
	d.WaitReady(t, 10*time.Second)
	tests := []struct {
		name   string
		method string
		path   string
		key    string
		body   string
		want   int
	}{
		{"invalid json", "POST", "/v1/chat/completions", "sk-1", `{"model":`, 400},
		{"missing messages", "POST", "/v1/chat/completions", "sk-1", `{"model":"m"}`, 400},
		{"empty messages", "POST", "/v1/chat/completions", "sk-1", `{"model":"m","messages":[]}`, 400},
		{"wrong type", "POST", "/v1/chat/completions", "sk-1", `{"model":"m","messages":"hi"}`, 400},
		{"body over cap", "POST", "/v1/chat/completions", "sk-1", `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`, 413},
		{"unknown route", "GET", "/v1/nothing", "sk-1", "", 404},
		{"no key", "POST", "/v1/chat/completions", "", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 401},
		{"wrong key", "POST", "/v1/chat/completions", "sk-2", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 401},
		// No admin credential is configured: the admin API is no one's.
		{"admin without a credential", "GET", "/internal/pool", "", "", 403},
		{"admin with a user key", "GET", "/internal/pool", "sk-1", "", 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, d.URL+tt.path, strings.NewReader(tt.body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Request-Id", "test-"+strings.ReplaceAll(tt.name, " ", "-"))
			if tt.key != "" {
				req.Header.Set("Authorization", "Bearer "+tt.key)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tt.want {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.want, b)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("content-type %q", ct)
			}
			if got := resp.Header.Get("X-Request-Id"); got != req.Header.Get("X-Request-Id") {
				t.Errorf("x-request-id %q, want the client's %q", got, req.Header.Get("X-Request-Id"))
			}
			var eb errorBody
			if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil {
				t.Fatal(err)
			}
			want := []string{"message", "type", "param", "code"}
			if strings.HasPrefix(tt.path, "/internal/") {
				want = []string{"code", "message"} // the admin API's own shape
			}
			for _, k := range want {
				if _, ok := eb.Error[k]; !ok {
					t.Errorf("error body lacks %q: %v", k, eb.Error)
				}
			}
			if len(eb.Error) != len(want) {
				t.Errorf("error body %v, want exactly %v", eb.Error, want)
			}
		})
	}
}

func TestNoReadyInstanceIs503(t *testing.T) {
	// A worker that exits at once: never ready.
	d := daemontest.StartDaemon(t, "POOLGATE_WORKER_BIN="+executable(t), `POOLGATE_ACCOUNTS=[{"name":"a"}]`)
	resp, err := http.Get(d.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "no ready instance") {
		t.Errorf("readyz: %d %s", resp.StatusCode, b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := sdk(d, "x")
	_, err = client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "m",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("got %v, want a 503 API error", err)
	}
}

func TestRefusesPublicListenWithoutKeys(t *testing.T) {
	err := serve(context.Background(), Options{}, func() []string { return []string{"POOLGATE_LISTEN=0.0.0.0:0"} }, nil, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "POOLGATE_API_KEYS") {
		t.Errorf("got %v, want a refusal naming POOLGATE_API_KEYS", err)
	}
}

func TestStatsAndRawModels(t *testing.T) {
	d := daemontest.StartDaemon(t, "POOLGATE_API_KEYS=sk-1", "POOLGATE_ADMIN_TOKEN=adm")
	d.WaitReady(t, 15*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	client := sdk(d, "sk-1")
	for i := range 3 {
		if _, err := client.Chat.Completions.New(ctx, chatParams(strings.Repeat("x", i+1))); err != nil {
			t.Fatal(err)
		}
	}
	var stats struct {
		Requests struct {
			Total float64            `json:"total"`
			ByAPI map[string]float64 `json:"by_api"`
		} `json:"requests"`
		Tokens      map[string]float64 `json:"tokens"`
		Concurrency map[string]float64 `json:"concurrency"`
		Pool        []route.InstanceStatus
	}
	if code := d.GetJSON(t, "/internal/stats", "adm", &stats); code != http.StatusOK {
		t.Fatalf("stats: %d", code)
	}
	if stats.Requests.ByAPI["chat"] != 3 || stats.Tokens["output"] == 0 || stats.Concurrency["max_queue"] != 256 || len(stats.Pool) != 2 {
		t.Errorf("stats %+v", stats)
	}
	if code := d.GetJSON(t, "/internal/stats", "sk-1", nil); code != http.StatusForbidden {
		t.Errorf("a user key on admin: %d, want 403", code)
	}
	var raw struct {
		Models []chat.Model `json:"models"`
	}
	if code := d.GetJSON(t, "/internal/models/raw?instance=sim-1", "adm", &raw); code != http.StatusOK || len(raw.Models) == 0 {
		t.Errorf("models/raw: %d %+v", code, raw)
	}
	var eb errorBody
	if code := d.GetJSON(t, "/internal/models/raw?instance=nope", "adm", &eb); code != http.StatusNotFound || !strings.Contains(string(eb.Error["message"]), "nope") {
		t.Errorf("unknown instance: %d %v", code, eb.Error)
	}
}

func TestDrainAndRestart(t *testing.T) {
	d := daemontest.StartDaemon(t, "POOLGATE_ADMIN_TOKEN=adm")
	state := func() route.InstanceStatus {
		var s route.Snapshot
		d.GetJSON(t, "/internal/pool", "adm", &s)
		return s.Instances[0]
	}
	waitState := func(want supervisor.State, within time.Duration) route.InstanceStatus {
		t.Helper()
		var in route.InstanceStatus
		testenv.WaitForNoError(t, within, string(want), func() error {
			if in = state(); in.State != want {
				return fmt.Errorf("%s is %s", in.Name, in.State)
			}
			return nil
		})
		return in
	}
	waitState(supervisor.StateReady, 15*time.Second)
	// A slow turn is running when the drain starts: it is never cut.
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		client := sdk(d, "x")
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "m",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("slow [[sim:delay=1500ms]]")}})
		done <- err
	}()
	time.Sleep(300 * time.Millisecond) // the turn is running (on either instance)
	req, _ := http.NewRequest(http.MethodPost, d.URL+"/internal/pool/sim-1/drain", nil)
	req.Header.Set("Authorization", "Bearer adm")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("drain: %v %v", resp, err)
	}
	resp.Body.Close()
	stopped := waitState(supervisor.StateStopped, 15*time.Second)
	if stopped.PID != 0 {
		t.Errorf("stopped instance still has pid %d", stopped.PID)
	}
	if err := <-done; err != nil {
		t.Errorf("the turn running during the drain failed: %v", err)
	}
	req, _ = http.NewRequest(http.MethodPost, d.URL+"/internal/pool/sim-1/restart", nil)
	req.Header.Set("Authorization", "Bearer adm")
	if resp, err = http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("restart: %v %v", resp, err)
	}
	resp.Body.Close()
	waitState(supervisor.StateReady, 15*time.Second)
}
