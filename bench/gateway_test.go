package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/poolgate/poolgate/internal/testenv"
)

// The harness's gateway starts as every scenario starts it (the openai
// driver on simulated workers) and answers a chat completion: a daemon
// setting that stops it from starting fails here, not in a benchmark run.
func TestGatewayStartsAndServes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g, err := startGateway(ctx, testenv.PoolgateBin(t), t.TempDir(), gatewayConfig{Accounts: 2})
	if err != nil {
		t.Fatalf("start the gateway: %v", err)
	}
	defer g.stop(syscall.SIGINT, 10*time.Second)
	if len(g.workers) != 2 {
		t.Fatalf("%d workers ready, want 2", len(g.workers))
	}
	body := `{"model":"m","messages":[{"role":"user","content":"hello"}]}`
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"chat.completion"`) {
		t.Errorf("chat completion: %d %s", resp.StatusCode, b)
	}
}
