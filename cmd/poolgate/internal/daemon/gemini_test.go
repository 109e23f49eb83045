package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"google.golang.org/genai"
)

// The official Gemini SDK against the daemon on its simulated Lingma
// workers: plain, streamed, tool-calling, counted and structured requests,
// and the errors it reads.

func geminiSDK(t *testing.T, d *daemontest.Daemon, key string) *genai.Client {
	t.Helper()
	c, err := genai.NewClient(context.Background(), &genai.ClientConfig{APIKey: key, Backend: genai.BackendGeminiAPI,
		HTTPOptions: genai.HTTPOptions{BaseURL: d.URL}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestGeminiSDK(t *testing.T) {
	d := protoDaemon(t)
	c := geminiSDK(t, d, "sk-1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const model = "gemini-2.5-flash"

	t.Run("plain", func(t *testing.T) {
		resp, err := c.Models.GenerateContent(ctx, model, genai.Text("hello"), &genai.GenerateContentConfig{
			SystemInstruction: genai.NewContentFromText("Be brief.", genai.RoleUser)})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Text() != "You said: hello" || resp.ModelVersion != model || resp.ResponseID == "" ||
			resp.Candidates[0].FinishReason != genai.FinishReasonStop || resp.UsageMetadata.TotalTokenCount == 0 {
			t.Errorf("answer %q, model %q, id %q, finish %q, usage %+v", resp.Text(), resp.ModelVersion, resp.ResponseID,
				resp.Candidates[0].FinishReason, resp.UsageMetadata)
		}
	})
	t.Run("streamed", func(t *testing.T) {
		var text strings.Builder
		var last *genai.GenerateContentResponse
		for resp, err := range c.Models.GenerateContentStream(ctx, model, genai.Text("hello [[sim:chunks=3]]"), nil) {
			if err != nil {
				t.Fatal(err)
			}
			text.WriteString(resp.Text())
			last = resp
		}
		if text.String() != "You said: hello" || last == nil || last.Candidates[0].FinishReason != genai.FinishReasonStop {
			t.Errorf("streamed %q, last %+v", text.String(), last)
		}
	})
	t.Run("tool round trip", func(t *testing.T) {
		cfg := &genai.GenerateContentConfig{Tools: []*genai.Tool{{FunctionDeclarations: []*genai.FunctionDeclaration{{
			Name: "get_weather", Description: "Weather for a city",
			Parameters: &genai.Schema{Type: genai.TypeObject, Properties: map[string]*genai.Schema{"city": {Type: genai.TypeString}},
				Required: []string{"city"}}}}}}}
		user := genai.NewContentFromText("Paris [[sim:call=get_weather]]", genai.RoleUser)
		resp, err := c.Models.GenerateContent(ctx, model, []*genai.Content{user}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		calls := resp.FunctionCalls()
		if len(calls) != 1 || calls[0].Name != "get_weather" || calls[0].Args["city"] != "Paris" || calls[0].ID == "" {
			t.Fatalf("calls %+v, want get_weather(city=Paris) with an id", calls)
		}
		result := genai.NewContentFromParts([]*genai.Part{{FunctionResponse: &genai.FunctionResponse{ID: calls[0].ID,
			Name: "get_weather", Response: map[string]any{"output": "18C and sunny"}}}}, genai.RoleUser)
		resp, err = c.Models.GenerateContent(ctx, model, []*genai.Content{user, resp.Candidates[0].Content, result}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if resp.Text() != "Tool get_weather returned: 18C and sunny" {
			t.Errorf("after the result: %q", resp.Text())
		}
	})
	t.Run("counted", func(t *testing.T) {
		contents := genai.Text("count these words please")
		n, err := c.Models.CountTokens(ctx, model, contents, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Models.GenerateContent(ctx, model, contents, nil)
		if err != nil {
			t.Fatal(err)
		}
		if n.TotalTokens == 0 || n.TotalTokens != resp.UsageMetadata.PromptTokenCount {
			t.Errorf("counted %d tokens, the turn's usage says %d", n.TotalTokens, resp.UsageMetadata.PromptTokenCount)
		}
	})
	t.Run("structured", func(t *testing.T) {
		resp, err := c.Models.GenerateContent(ctx, model, genai.Text("rate it"), &genai.GenerateContentConfig{
			ResponseMIMEType: "application/json",
			ResponseSchema: &genai.Schema{Type: genai.TypeObject, Properties: map[string]*genai.Schema{
				"score": {Type: genai.TypeInteger}, "why": {Type: genai.TypeString}}}})
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Score int
			Why   string
		}
		if err := json.Unmarshal([]byte(resp.Text()), &v); err != nil || v.Score != 1 || v.Why != "rate it" {
			t.Errorf("answer %q (%v), want JSON following the schema", resp.Text(), err)
		}
	})
	t.Run("models", func(t *testing.T) {
		var names []string
		for m, err := range c.Models.All(ctx) {
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, m.Name)
		}
		if len(names) == 0 || !strings.HasPrefix(names[0], "models/") {
			t.Errorf("models %v", names)
		}
	})
	t.Run("refused key", func(t *testing.T) {
		_, err := geminiSDK(t, d, "sk-wrong").Models.GenerateContent(ctx, model, genai.Text("hi"), nil)
		var apiErr genai.APIError
		if !errors.As(err, &apiErr) || apiErr.Code != http.StatusUnauthorized || apiErr.Status != "UNAUTHENTICATED" {
			t.Errorf("got %v, want a 401 UNAUTHENTICATED", err)
		}
	})
}

// A key sent as ?key= serves the request and appears in no log line; the
// error shapes of the edge and of the protocol are Google's.
func TestGeminiKeyAndErrors(t *testing.T) {
	d := protoDaemon(t)
	post := func(path, key, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, d.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("X-Goog-Api-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	hello := `{"contents":[{"parts":[{"text":"hello"}]}]}`
	tests := []struct {
		name, path, key, body string
		wantStatus            int
		want                  string
	}{
		{"key in the query", "/v1beta/models/g:generateContent?key=sk-1", "", hello, 200, "You said: hello"},
		{"key in the header, on /v1", "/v1/models/g:generateContent", "sk-1", hello, 200, "You said: hello"},
		{"no key", "/v1beta/models/g:generateContent", "", hello, 401, `"status":"UNAUTHENTICATED"`},
		{"unknown method", "/v1beta/models/g:embedContent", "sk-1", hello, 404, `"status":"NOT_FOUND"`},
		{"bad body", "/v1beta/models/g:generateContent", "sk-1", `{"contents":[]}`, 400, `"status":"INVALID_ARGUMENT"`},
		{"two candidates", "/v1beta/models/g:generateContent", "sk-1",
			`{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"candidateCount":2}}`, 400, "candidateCount"},
		{"upstream failure", "/v1beta/models/g:generateContent", "sk-1", `{"contents":[{"parts":[{"text":"[[sim:error]]"}]}]}`,
			502, `"status":"UNAVAILABLE"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := post(tt.path, tt.key, tt.body)
			if status != tt.wantStatus || !strings.Contains(body, tt.want) {
				t.Errorf("got %d %s, want %d with %q", status, body, tt.wantStatus, tt.want)
			}
		})
	}
	if strings.Contains(d.Log(), "sk-1") {
		t.Errorf("the key shows in the daemon's log")
	}
}
