package hostile_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/testenv"
)

// chatAnswer sends a non-streamed chat with the user key and returns its
// status and text.
func chatAnswer(t *testing.T, d *daemontest.Daemon, prompt string) (int, string) {
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
	d := daemontest.StartDaemon(t, "POOLGATE_API_KEYS="+apiKey, "POOLGATE_ADMIN_TOKEN="+adminToken,
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

	on := daemontest.StartDaemon(t, "POOLGATE_API_KEYS="+apiKey, "POOLGATE_ADMIN_TOKEN="+adminToken, "POOLGATE_SIM_DIRECTIVES=true")
	on.WaitReady(t, 20*time.Second)
	code, text := chatAnswer(t, on, "e [[sim:words=1000000]]")
	if n := len(strings.Fields(text)); code != 200 || n > 10000 {
		t.Errorf("[[sim:words=1000000]]: %d, %d words; want 200 and at most 10,000", code, n)
	}
}

// TestViewersDoNotReadLoginSecrets: a viewer reads the login states, but
// not what a login in progress keeps secret. A login whose page (the
// test's own, on a host the recipe allows) never shows its form fails with
// the page's address, state nonce and all: an admin reads it whole, a
// viewer without its query. Before, a viewer read it whole. (The Python
// gateway's answers, internal/pycompat, keep it and the account's username
// from a viewer too: its test of the same name.)
func TestViewersDoNotReadLoginSecrets(t *testing.T) {
	const nonce = "nonce-s3cret-4471"
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, "<html><body>no form here</body></html>")
	}))
	defer page.Close()
	accts, _ := json.Marshal([]map[string]any{
		{"name": "a1", "username": "alice@example.com", "password": "pw", "args": []string{"--login-url=" + page.URL + "/login?state=" + nonce}}})
	const viewerKey = "sk-viewer"
	d := daemontest.StartDaemon(t, "POOLGATE_ACCOUNTS="+string(accts), "POOLGATE_ADMIN_TOKEN="+adminToken,
		`POOLGATE_API_KEYS=[{"name":"v","key":"`+viewerKey+`","role":"viewer"}]`,
		"POOLGATE_LOGIN_ATTEMPTS=1", "POOLGATE_LOGIN_TIMEOUT=5s", "POOLGATE_HEALTH_INTERVAL=300ms")
	read := func(token string) string {
		var st struct {
			Instances []struct {
				Name    string `json:"name"`
				PageURL string `json:"page_url"`
			} `json:"instances"`
		}
		d.GetJSON(t, "/internal/auto-login/status", token, &st)
		for _, in := range st.Instances {
			if in.Name == "a1" {
				return in.PageURL
			}
		}
		return ""
	}
	testenv.WaitFor(t, 60*time.Second, "a1's login to fail on the page", func() bool { return read(adminToken) != "" })
	if got := read(adminToken); !strings.Contains(got, nonce) {
		t.Errorf("the admin reads page %q; want the whole address", got)
	}
	if got := read(viewerKey); strings.Contains(got, nonce) || !strings.HasPrefix(got, page.URL+"/login") {
		t.Errorf("a viewer reads page %q; want the address without its state nonce", got)
	}
}

// TestPlainImportNamesItsAccount: an unsealed bundle proves nothing about
// whose it is, so an import of one that names no account is refused, and
// the instance it was sent to keeps its own login. Before, an admin import
// of a1's plain export without its "account" field logged a2 in as a1.
func TestPlainImportNamesItsAccount(t *testing.T) {
	accts, _ := json.Marshal([]map[string]any{
		{"name": "a1", "username": "alice", "password": "pw", "args": []string{"--logged-in=alice", "--accounts=alice:pw"}},
		{"name": "a2", "username": "bob", "password": "pw", "args": []string{"--accounts=bob:pw"}}})
	d := daemontest.StartDaemon(t, "POOLGATE_ACCOUNTS="+string(accts), "POOLGATE_ADMIN_TOKEN="+adminToken,
		"POOLGATE_BUNDLE_IMPORT_PLAIN=true", "POOLGATE_BUNDLE_EXPORT_PLAIN=true", "POOLGATE_AUTO_LOGIN=false",
		"POOLGATE_HEALTH_INTERVAL=300ms")
	testenv.WaitFor(t, 20*time.Second, "a1 ready", func() bool { return instances(t, d)["a1"].State == "ready" })
	var exp map[string]any
	if code := postJSON(t, d, "/internal/session/export?instance=a1", nil, &exp); code != 200 || exp["bundle_b64"] == nil {
		t.Fatalf("plain export of a1: %d %v", code, exp)
	}
	before := instances(t, d)["a2"]
	tests := []struct {
		name, path string
		body       any
	}{
		{"the export without its account", "/internal/session/import?instance=a2",
			map[string]any{"instance": "a1", "bundle_b64": exp["bundle_b64"], "raw_bytes": exp["raw_bytes"]}},
		{"the bare bundle", "/internal/session/import?instance=a2", exp["bundle_b64"]},
		{"named in the body", "/internal/session/import", map[string]any{"instance": "a2", "bundle_b64": exp["bundle_b64"]}},
	}
	for _, tt := range tests {
		var out map[string]any
		if code := postJSON(t, d, tt.path, tt.body, &out); code != http.StatusBadRequest {
			t.Errorf("%s: %d %v, want 400", tt.name, code, out)
		}
	}
	time.Sleep(time.Second) // a restart on another's login would show
	if now := instances(t, d)["a2"]; now != before {
		t.Errorf("a2 is now %+v, was %+v: an import that named no account touched it", now, before)
	}
}

// postJSON posts body (nil: none) with the admin token and decodes the
// answer into out.
func postJSON(t *testing.T, d *daemontest.Daemon, path string, body, out any) int {
	t.Helper()
	var rd io.Reader = http.NoBody
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest("POST", d.URL+path, rd)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	_ = json.NewDecoder(resp.Body).Decode(out)
	return resp.StatusCode
}

// TestStoreNamesNoKeyDigest: the names and records a key's conversations
// and stored Responses leave in Redis hold keyed digests of the API key,
// not the plain SHA-256 digests anyone who reads Redis could test a guessed
// key against. Before, the stored Responses' quota keys were named by
// sha256(key)[:16] and the affinity entries by a fixed-prefix SHA-256.
func TestStoreNamesNoKeyDigest(t *testing.T) {
	redis := testenv.Redis(t)
	d := daemontest.StartDaemon(t, "POOLGATE_API_KEYS="+apiKey, "POOLGATE_ADMIN_TOKEN="+adminToken,
		"POOLGATE_REDIS_URL="+redis.URL(), "POOLGATE_REDIS_PREFIX="+testenv.KeyPrefix(t))
	d.WaitReady(t, 20*time.Second)
	if code, body := send(t, d, hostileCase{method: "POST", path: "/v1/responses", header: jsonHeader,
		body: fixed(`{"model":"m","input":"hi","store":true}`)}); code != 200 {
		t.Fatalf("a stored response: %d %s", code, clip(body))
	}
	if code, body := send(t, d, hostileCase{method: "POST", path: "/v1/chat/completions", header: jsonHeader, body: chat("")}); code != 200 {
		t.Fatalf("a chat: %d %s", code, clip(body))
	}
	plain := sha256.Sum256([]byte(apiKey))
	owner := sha256.Sum256([]byte("poolgate-owner\x00" + apiKey))
	digests := []string{hex.EncodeToString(plain[:16]), hex.EncodeToString(owner[:8])}
	c := redis.Client(t)
	var keys []string
	testenv.WaitFor(t, 10*time.Second, "the response and the affinity entry in Redis", func() bool {
		keys, _ = c.Keys(context.Background(), testenv.KeyPrefix(t)+"*").Result()
		resp, aff := false, false
		for _, k := range keys {
			resp = resp || strings.Contains(k, "{respq:")
			aff = aff || strings.Contains(k, "{aff:") && !strings.HasSuffix(k, ":idx")
		}
		return resp && aff
	})
	ctx := context.Background()
	for _, k := range keys {
		var val string
		switch typ, _ := c.Type(ctx, k).Result(); typ {
		case "string":
			val, _ = c.Get(ctx, k).Result()
		case "hash":
			val = fmt.Sprint(c.HGetAll(ctx, k).Val())
		case "zset":
			val = fmt.Sprint(c.ZRange(ctx, k, 0, -1).Val())
		case "set":
			val = fmt.Sprint(c.SMembers(ctx, k).Val())
		case "list":
			val = fmt.Sprint(c.LRange(ctx, k, 0, -1).Val())
		}
		for _, dg := range digests {
			if strings.Contains(k, dg) || strings.Contains(val, dg) {
				t.Errorf("Redis key %s names or holds the plain digest %s of the API key", k, dg)
			}
		}
	}
}
