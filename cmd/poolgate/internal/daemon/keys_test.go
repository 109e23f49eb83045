package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poolgate/poolgate/admin"
	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/internal/usage"
)

// callAs sends one chat completion (or, with anthropic, one message) as key
// and returns the status, the headers and the body.
func callAs(t *testing.T, d *daemontest.Daemon, key, prompt string, anthropic bool) (int, http.Header, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	path, body := "/v1/chat/completions", `{"model":"x","messages":[{"role":"user","content":`+quote(prompt)+`}]}`
	if anthropic {
		path, body = "/v1/messages", `{"model":"x","max_tokens":64,"messages":[{"role":"user","content":`+quote(prompt)+`}]}`
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if anthropic {
		req.Header.Set("x-api-key", key)
		req.Header.Set("anthropic-version", "2023-06-01")
	} else {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Two replicas on one Redis hold a key to one set of limits: requests per
// minute and requests at once counted together, a token quota spent
// together, each refusal a 429 in the caller's protocol naming the limit;
// and both read the same usage and request log.
func TestKeyLimitsAndUsageAcrossReplicas(t *testing.T) {
	rs := testenv.Redis(t)
	keys := `[{"name":"team","key":"sk-team","rpm":6},{"name":"pair","key":"sk-pair","concurrency":2},` +
		`{"name":"quota","key":"sk-quota","tokens_per_day":40},{"name":"free","key":"sk-free"}]`
	env := []string{"POOLGATE_REDIS_URL=" + rs.URL(), "POOLGATE_REDIS_PREFIX=" + testenv.KeyPrefix(t),
		"POOLGATE_API_KEYS=" + keys, "POOLGATE_ADMIN_TOKEN=adm", "POOLGATE_METRICS_PUBLIC=true"}
	d1, d2 := daemontest.StartDaemon(t, env...), daemontest.StartDaemon(t, env...)
	d1.WaitReady(t, 15*time.Second)
	d2.WaitReady(t, 15*time.Second)
	replicas := []*daemontest.Daemon{d1, d2}

	t.Run("requests per minute", func(t *testing.T) {
		for i := range 6 {
			if st, _, b := callAs(t, replicas[i%2], "sk-team", "hello", false); st != http.StatusOK {
				t.Fatalf("request %d: %d %s", i+1, st, b)
			}
		}
		for i, d := range replicas {
			st, h, b := callAs(t, d, "sk-team", "hello", i == 1)
			if st != http.StatusTooManyRequests || h.Get("X-Poolgate-Limit") != "rpm" || h.Get("Retry-After") == "" {
				t.Fatalf("replica %d, 7th request: %d limit=%q retry-after=%q %s", i+1, st, h.Get("X-Poolgate-Limit"), h.Get("Retry-After"), b)
			}
			var shape struct {
				Type  string `json:"type"`
				Error struct {
					Type    string `json:"type"`
					Code    string `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal(b, &shape); err != nil {
				t.Fatalf("429 body %s: %v", b, err)
			}
			anthropic := i == 1
			if anthropic && (shape.Type != "error" || shape.Error.Type != "rate_limit_error") ||
				!anthropic && (shape.Error.Code != "rate_limit_exceeded" || shape.Error.Type != "rate_limit_error") ||
				!strings.Contains(shape.Error.Message, `"team"`) || !strings.Contains(shape.Error.Message, "6 requests per minute") {
				t.Errorf("replica %d: 429 body %s does not name the key and its limit in its protocol's shape", i+1, b)
			}
		}
		if st, _, b := callAs(t, d2, "sk-free", "hello", false); st != http.StatusOK {
			t.Errorf("another key was refused with its neighbour: %d %s", st, b)
		}
	})

	t.Run("requests at once", func(t *testing.T) {
		var wg sync.WaitGroup
		for _, d := range replicas {
			wg.Go(func() {
				if st, _, b := callAs(t, d, "sk-pair", "[[sim:delay=2s]] slow", false); st != http.StatusOK {
					t.Errorf("slow request: %d %s", st, b)
				}
			})
		}
		// Both slow requests hold a slot once each replica has a turn in
		// flight.
		testenv.WaitFor(t, 10*time.Second, "a turn in flight on each replica", func() bool {
			return scrape(t, d1, "poolgate_in_flight") == 1 && scrape(t, d2, "poolgate_in_flight") == 1
		})
		st, h, b := callAs(t, d1, "sk-pair", "hello", false)
		if st != http.StatusTooManyRequests || h.Get("X-Poolgate-Limit") != "concurrency" {
			t.Errorf("third request at once: %d limit=%q %s", st, h.Get("X-Poolgate-Limit"), b)
		}
		wg.Wait()
		if st, _, b := callAs(t, d2, "sk-pair", "hello", false); st != http.StatusOK {
			t.Errorf("after the slow requests ended: %d %s", st, b)
		}
	})

	t.Run("tokens per day", func(t *testing.T) {
		spent := 0
		for i := 0; ; i++ {
			st, h, b := callAs(t, replicas[i%2], "sk-quota", "a few words to spend the quota", false)
			if st == http.StatusTooManyRequests {
				if h.Get("X-Poolgate-Limit") != "tokens_per_day" || !strings.Contains(string(b), "insufficient_quota") {
					t.Errorf("quota refusal: limit=%q %s", h.Get("X-Poolgate-Limit"), b)
				}
				if spent < 40 {
					t.Errorf("refused after %d tokens, quota 40", spent)
				}
				break
			}
			if st != http.StatusOK || i > 20 {
				t.Fatalf("request %d: %d %s (spent %d)", i+1, st, b, spent)
			}
			var r struct {
				Usage struct {
					Total int `json:"total_tokens"`
				} `json:"usage"`
			}
			_ = json.Unmarshal(b, &r)
			spent += r.Usage.Total
		}
	})

	// Both replicas read the same totals, by key and by account.
	var u1, u2 admin.UsageAnswer
	testenv.WaitFor(t, 10*time.Second, "both replicas to report the same usage", func() bool {
		u1, u2 = admin.UsageAnswer{}, admin.UsageAnswer{}
		d1.GetJSON(t, "/internal/usage", "adm", &u1)
		d2.GetJSON(t, "/internal/usage", "adm", &u2)
		k := byKey(u1.Rows)
		return reflect.DeepEqual(u1, u2) && k["team"].Requests == 8 && k["pair"].Requests == 4 && k["quota"].Errors == 1
	})
	team, pair, free := byKey(u1.Rows)["team"], byKey(u1.Rows)["pair"], byKey(u1.Rows)["free"]
	if team.Requests != 8 || team.Errors != 2 || team.InputTokens == 0 || team.OutputTokens == 0 {
		t.Errorf("team usage %+v, want 8 requests (6 served, 2 refused), 2 errors and tokens", team)
	}
	if pair.Requests != 4 || pair.Errors != 1 || free.Requests != 1 || free.Errors != 0 {
		t.Errorf("pair usage %+v (want 4 requests, 1 error), free %+v (want 1, 0)", pair, free)
	}
	accounts := map[string]bool{}
	for _, r := range u1.Rows {
		accounts[r.Account] = true
	}
	if !accounts["sim-1"] && !accounts["sim-2"] {
		t.Errorf("usage names no account: %+v", u1.Rows)
	}
	var filtered admin.UsageAnswer
	d2.GetJSON(t, "/internal/usage?key=team&from="+time.Now().UTC().Format("2006-01-02"), "adm", &filtered)
	if filtered.Totals != team.Totals {
		t.Errorf("usage?key=team totals %+v, want %+v", filtered.Totals, team.Totals)
	}

	// The request log: both replicas' requests in one list, refusals with
	// their reason, no secret anywhere.
	var l1, l2 admin.RequestsAnswer
	d1.GetJSON(t, "/internal/requests?key=team&status=429", "adm", &l1)
	if len(l1.Requests) != 2 || !strings.Contains(l1.Requests[0].Error, "requests per minute") {
		t.Errorf("request log of team's refusals: %+v", l1.Requests)
	}
	d2.GetJSON(t, "/internal/requests?key=team", "adm", &l2)
	protocols := map[string]int{}
	for _, e := range l2.Requests {
		protocols[e.Protocol]++
		if e.Status == http.StatusOK && (e.Account == "" || e.Model == "" || e.InputTokens == 0) {
			t.Errorf("served entry lacks its account, model or tokens: %+v", e)
		}
	}
	if len(l2.Requests) != 8 || protocols["chat"] != 7 || protocols["messages"] != 1 {
		t.Errorf("request log of team: %d entries by protocol %v, want 8 (7 chat, 1 messages)", len(l2.Requests), protocols)
	}
	raw, _ := json.Marshal(l2)
	for _, secret := range []string{"sk-team", "sk-pair", "sk-quota"} {
		if bytes.Contains(raw, []byte(secret)) {
			t.Errorf("the request log shows the key %s", secret)
		}
	}
	if got := scrape(t, d1, `poolgate_key_requests_total{code="429",key="team"}`); got != 1 {
		t.Errorf("replica 1 counted %v of team's 429s, want 1", got)
	}
}

// byKey sums rows per key name.
func byKey(rows []usage.Row) map[string]usage.Row {
	out := map[string]usage.Row{}
	for _, r := range rows {
		s := out[r.Key]
		s.Key = r.Key
		s.Requests += r.Requests
		s.InputTokens += r.InputTokens
		s.OutputTokens += r.OutputTokens
		s.Errors += r.Errors
		s.Reused += r.Reused
		out[r.Key] = s
	}
	return out
}
