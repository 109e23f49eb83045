package pycompat_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/pool/route"
)

// The end-to-end tests of the compatibility run the real daemon (daemontest)
// as an operator who moves over from the Python gateway runs it; these are
// their helpers, as the daemon's own tests have them.

// apiCall is one answered request.
type apiCall struct {
	code   int
	header http.Header
	body   string
}

// poolState is the daemon's /internal/pool.
func poolState(t *testing.T, d *daemontest.Daemon, token string) route.Snapshot {
	t.Helper()
	var s route.Snapshot
	if code := d.GetJSON(t, "/internal/pool", token, &s); code != http.StatusOK {
		t.Fatalf("/internal/pool: %d", code)
	}
	return s
}

// send posts body (JSON) to d's path with the API key and reads the whole
// answer, a stream too.
func send(t *testing.T, d *daemontest.Daemon, path, key string, body any) apiCall {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, d.URL+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("X-Api-Key", key)
	}
	req.Header.Set("Anthropic-Version", "2023-06-01")
	client := &http.Client{Timeout: 60 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return apiCall{code: resp.StatusCode, header: resp.Header, body: string(out)}
}

// chatBody is a chat completions request for one user message.
func chatBody(model, prompt string, extra map[string]any) map[string]any {
	b := map[string]any{"model": model, "messages": []map[string]any{{"role": "user", "content": prompt}}}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

// post posts body to url with a Bearer token.
func post(t *testing.T, url, token string, body []byte) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// newBundleKey is a fresh bundle_key.
func newBundleKey(t *testing.T) string {
	var k [32]byte
	_, _ = rand.Read(k[:])
	return base64.StdEncoding.EncodeToString(k[:])
}

// errorBody is an error answer in OpenAI's or the admin API's shape.
type errorBody struct {
	Error map[string]json.RawMessage `json:"error"`
}

// sdk is OpenAI's Go SDK on d.
func sdk(d *daemontest.Daemon, key string) openai.Client {
	return openai.NewClient(option.WithBaseURL(d.URL+"/v1"), option.WithAPIKey(key), option.WithMaxRetries(0))
}
