package hostile_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
)

// TestBodiesStayUnderTheBudget sends twelve 3 MiB requests at once to a
// gateway whose body budget is 10 MiB, each turn held for two seconds by
// the worker: three bodies fit, and only three are served; the others get
// 429 with Retry-After in their protocol before their bodies are read, and
// the bytes held never exceed the budget.
func TestBodiesStayUnderTheBudget(t *testing.T) {
	const budget, size, n = 10 << 20, 3 << 20, 12
	d := daemontest.StartDaemon(t, "POOLGATE_API_KEYS="+apiKey, "POOLGATE_ADMIN_TOKEN="+adminToken,
		"POOLGATE_BODY_BUDGET_BYTES=10485760")
	d.WaitReady(t, 20*time.Second)
	head, tail := `{"model":"m","messages":[{"role":"user","content":"[[sim:delay=2s]] `, `"}]}`
	body := []byte(head + strings.Repeat("a", size-len(head)-len(tail)) + tail)
	stop := make(chan struct{})
	peak := 0.0
	var watch sync.WaitGroup
	watch.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				if v, err := scrape(d, "poolgate_request_body_bytes"); err == nil {
					peak = max(peak, v)
				}
			}
		}
	})
	type answer struct {
		code       int
		retryAfter string
		body       []byte
	}
	answers := make(chan answer, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			req, _ := http.NewRequest("POST", d.URL+"/v1/chat/completions", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+apiKey)
			req.Header.Set("Content-Type", "application/json")
			resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
			if err != nil {
				t.Errorf("request: %v", err)
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers <- answer{resp.StatusCode, resp.Header.Get("Retry-After"), b}
		})
	}
	wg.Wait()
	close(stop)
	watch.Wait()
	close(answers)
	served, refused := 0, 0
	for a := range answers {
		switch {
		case a.code == 200:
			served++
		case a.code == 429 && a.retryAfter != "" && hasShape(a.body, openAI) && bytes.Contains(a.body, []byte(`"overloaded"`)):
			refused++
		default:
			t.Errorf("answer %d (Retry-After %q) %s", a.code, a.retryAfter, clip(a.body))
		}
	}
	if served != budget/size || refused != n-budget/size {
		t.Errorf("%d served and %d refused, want %d served (what the budget holds) and the rest refused", served, refused, budget/size)
	}
	if peak > budget {
		t.Errorf("%v bytes of bodies held at once, over the budget of %d", peak, budget)
	}
	if now := metric(t, d, "poolgate_request_body_bytes"); now != 0 {
		t.Errorf("%v bytes still held after every request ended", now)
	}
}
