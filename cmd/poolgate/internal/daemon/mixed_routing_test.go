package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	anth "github.com/anthropics/anthropic-sdk-go"
	"github.com/openai/openai-go/v3"
	"google.golang.org/genai"

	"github.com/poolgate/poolgate/cmd/poolgate/daemontest"
	"github.com/poolgate/poolgate/internal/testenv"
	"github.com/poolgate/poolgate/pool/supervisor"
)

// One daemon, simulated Lingma accounts beside simulated model servers:
// each model goes to its kind through every protocol, the model lists name
// the kind of each model, a model nobody serves is a 404 in the caller's
// protocol, an agent's own model name takes the default model, and a
// conversation stays on its kind until its model moves.
func TestMixedPoolRoutesByModel(t *testing.T) {
	d, _ := startMixed(t, mixedKinds(), "")
	ins := instancesOf(t, d)
	for name, in := range ins {
		want := "lingma"
		if strings.HasPrefix(name, "ms-") {
			want = "openai"
		}
		if in.Driver != want {
			t.Errorf("/internal/pool: %s has driver %q, want %q", name, in.Driver, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ac, oc := anthClient(d), sdk(d, "any")

	t.Run("each model goes to its kind", func(t *testing.T) {
		for model, kind := range kindOfModel {
			for range 3 {
				code, inst, id, body := mixedPost(t, d, "/v1/chat/completions", nil, convBody(model, "hello "+model))
				if code != http.StatusOK {
					t.Fatalf("%s: %d %s", model, code, body)
				}
				if got := ins[inst].Driver; got != kind {
					t.Errorf("%s was served by %s, of kind %q; want %q", model, inst, got, kind)
				}
				if line := turnLine(t, d, id); turnAttr(line, "driver") != kind || turnAttr(line, "model") != model {
					t.Errorf("turn line %q: want driver=%s model=%s", line, kind, model)
				}
			}
		}
		// The official SDKs of the other protocols route alike.
		msg, err := ac.Messages.New(ctx, anth.MessageNewParams{Model: "ms-small", MaxTokens: 64,
			Messages: []anth.MessageParam{anth.NewUserMessage(anth.NewTextBlock("hello anthropic"))}})
		if err != nil || anthText(*msg) != "You said: hello anthropic" {
			t.Fatalf("Anthropic SDK on ms-small: %v", err)
		}
		resp, err := geminiSDK(t, d, "any").Models.GenerateContent(ctx, "lm-chat", genai.Text("hello gemini"), nil)
		if err != nil || resp.Text() != "You said: hello gemini" {
			t.Fatalf("Gemini SDK on lm-chat: %v", err)
		}
	})

	t.Run("the model lists name each model's kind", func(t *testing.T) {
		type listed struct {
			ID, Name, BaseModelID, Driver string
		}
		lists := map[string]func() []listed{
			"openai": func() []listed {
				var l struct{ Data []listed }
				d.GetJSON(t, "/v1/models", "", &l)
				return l.Data
			},
			"anthropic": func() []listed {
				var l struct{ Data []listed }
				getWith(t, d, "/v1/models", map[string]string{"anthropic-version": "2023-06-01"}, &l)
				return l.Data
			},
			"gemini": func() []listed {
				var l struct{ Models []listed }
				d.GetJSON(t, "/v1beta/models", "", &l)
				for i := range l.Models {
					l.Models[i].ID = l.Models[i].BaseModelID
				}
				return l.Models
			},
		}
		for proto, list := range lists {
			got := map[string]string{}
			for _, m := range list() {
				got[m.ID] = m.Driver
			}
			for model, kind := range kindOfModel {
				if got[model] != kind {
					t.Errorf("%s listing: %s has driver %q, want %q (all: %v)", proto, model, got[model], kind, got)
				}
			}
			if len(got) != len(kindOfModel) {
				t.Errorf("%s listing: %v, want the %d models of the pool", proto, got, len(kindOfModel))
			}
		}
	})

	t.Run("a model nobody serves is a 404 in the caller's protocol", func(t *testing.T) {
		names := func(msg string) bool {
			for m := range kindOfModel {
				if !strings.Contains(msg, m) {
					return false
				}
			}
			return strings.Contains(msg, "no-such-model")
		}
		_, err := oc.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "no-such-model",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
		var oe *openai.Error
		if !errors.As(err, &oe) || oe.StatusCode != http.StatusNotFound || oe.Code != "model_not_found" || oe.Param != "model" ||
			!names(oe.Message) {
			t.Errorf("OpenAI SDK: %v, want a 404 model_not_found naming the pool's models", err)
		}
		_, err = ac.Messages.New(ctx, anth.MessageNewParams{Model: "no-such-model", MaxTokens: 16,
			Messages: []anth.MessageParam{anth.NewUserMessage(anth.NewTextBlock("hi"))}})
		var ae *anth.Error
		if !errors.As(err, &ae) || ae.StatusCode != http.StatusNotFound || !strings.Contains(ae.RawJSON(), `"not_found_error"`) ||
			!names(ae.RawJSON()) {
			t.Errorf("Anthropic SDK: %v, want a 404 not_found_error naming the pool's models", err)
		}
		_, err = geminiSDK(t, d, "any").Models.GenerateContent(ctx, "no-such-model", genai.Text("hi"), nil)
		var ge genai.APIError
		if !errors.As(err, &ge) || ge.Code != http.StatusNotFound || ge.Status != "NOT_FOUND" || !names(ge.Message) {
			t.Errorf("Gemini SDK: %v, want a 404 NOT_FOUND naming the pool's models", err)
		}
		// A stream is refused the same, before any event.
		code, _, _, body := mixedPost(t, d, "/v1/chat/completions", nil,
			`{"model":"no-such-model","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		if code != http.StatusNotFound || !strings.Contains(body, "model_not_found") {
			t.Errorf("stream: %d %s, want a 404 JSON body", code, body)
		}
	})

	t.Run("an agent's own model name takes the default model", func(t *testing.T) {
		// Claude Code sends its own model names; the first model listed
		// (the first account's) serves them, and the turn line says which
		// kind it picked.
		code, inst, id, body := mixedPost(t, d, "/v1/messages", map[string]string{"anthropic-version": "2023-06-01"},
			`{"model":"claude-sonnet-4-5","max_tokens":32,"messages":[{"role":"user","content":"hi"}]}`)
		if code != http.StatusOK || ins[inst].Driver != "lingma" {
			t.Fatalf("claude-sonnet-4-5: %d on %s: %s", code, inst, body)
		}
		line := turnLine(t, d, id)
		if turnAttr(line, "requested") != "claude-sonnet-4-5" || turnAttr(line, "model") != "lm-coder" || turnAttr(line, "driver") != "lingma" {
			t.Errorf("turn line %q: want requested=claude-sonnet-4-5 model=lm-coder driver=lingma", line)
		}
		// A kind's own agent model name goes to that kind.
		code, inst, _, body = mixedPost(t, d, "/v1/chat/completions", nil, convBody("lingma-agent", "hi"))
		if code != http.StatusOK || ins[inst].Driver != "lingma" {
			t.Errorf("lingma-agent: %d on %s: %s", code, inst, body)
		}
	})

	t.Run("follow-ups keep their kind, and a model that moves starts fresh", func(t *testing.T) {
		texts := []string{"first [[sim:whoami]]"}
		var insts []string
		var lines []string
		ask := func(model string) {
			t.Helper()
			code, inst, id, body := mixedPost(t, d, "/v1/chat/completions", nil, convBody(model, texts...))
			if code != http.StatusOK {
				t.Fatalf("%s: %d %s", model, code, body)
			}
			texts = append(texts, chatAnswer(t, body), "next [[sim:whoami]]")
			insts, lines = append(insts, inst), append(lines, turnLine(t, d, id))
		}
		ask("lm-coder")
		ask("lm-coder")
		ask("lm-coder")
		if insts[1] != insts[0] || insts[2] != insts[0] || turnAttr(lines[1], "reused") != "true" || turnAttr(lines[2], "reused") != "true" {
			t.Errorf("Lingma follow-ups: instances %v, lines %q; want one instance, the session reused", insts, lines)
		}
		ask("ms-large") // the conversation moves to the model servers
		if ins[insts[3]].Driver != "openai" || turnAttr(lines[3], "reused") != "false" || turnAttr(lines[3], "new_session") != "kind_changed" {
			t.Errorf("moved to ms-large: served by %s, line %q; want an openai instance, new_session=kind_changed", insts[3], lines[3])
		}
		ask("ms-large")
		if insts[4] != insts[3] || turnAttr(lines[4], "new_session") != "" {
			t.Errorf("follow-up on ms-large: %s after %s, line %q; want the same instance", insts[4], insts[3], lines[4])
		}
		ask("lm-chat") // and back to Lingma: a new session there
		if ins[insts[5]].Driver != "lingma" || turnAttr(lines[5], "reused") != "false" || turnAttr(lines[5], "new_session") != "kind_changed" {
			t.Errorf("back to lm-chat: served by %s, line %q; want a Lingma instance, a new session, kind_changed", insts[5], lines[5])
		}
		if !strings.Contains(texts[len(texts)-2], "turn=1 ") {
			t.Errorf("back on Lingma the session is %q, want a fresh one (turn=1)", texts[len(texts)-2])
		}
	})
}

// getWith GETs path with headers and decodes the JSON answer into v.
func getWith(t *testing.T, d *daemontest.Daemon, path string, header map[string]string, v any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, d.URL+path, nil)
	for k, val := range header {
		req.Header.Set(k, val)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", path, resp.StatusCode, err)
	}
}

// With one kind's accounts all down, the other kind serves on, and a
// request for the down kind's model is a 503 in its protocol, not a 404:
// the model is known, its accounts are not ready.
func TestMixedPoolOneKindDown(t *testing.T) {
	d, _ := startMixed(t, mixedKinds(), "")
	for _, name := range []string{"ms-1", "ms-2"} {
		if code := adminPost(t, d, "/internal/pool/"+name+"/drain"); code != http.StatusOK && code != http.StatusAccepted {
			t.Fatalf("drain %s: %d", name, code)
		}
	}
	testenv.WaitFor(t, 20*time.Second, "the model servers stopped", func() bool { return readyOfKind(t, d, "openai") == 0 })
	// A killed Lingma worker too: the other one serves meanwhile. (A turn
	// sent to a worker whose death is not noticed yet is never risked on a
	// second one, so the requests start once it is.)
	killWorker(t, d, "lm-1")
	testenv.WaitFor(t, 10*time.Second, "lm-1 out of rotation", func() bool { return !instancesOf(t, d)["lm-1"].Serving })
	for i := range 6 {
		code, inst, _, body := mixedPost(t, d, "/v1/chat/completions", nil, convBody("lm-coder", "still here", "x", "turn "+string(rune('a'+i))))
		if code != http.StatusOK || !strings.HasPrefix(inst, "lm-") {
			t.Fatalf("lm-coder with the model servers down: %d on %q: %s", code, inst, body)
		}
	}
	start := time.Now()
	code, _, _, body := mixedPost(t, d, "/v1/chat/completions", nil, convBody("ms-small", "anyone?"))
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "no_instance") {
		t.Errorf("ms-small with its accounts down: %d %s, want 503 no_instance", code, body)
	}
	if waited := time.Since(start); waited > 15*time.Second {
		t.Errorf("the 503 took %s", waited)
	}
	// They come back, and serve their models again.
	for _, name := range []string{"ms-1", "ms-2"} {
		adminPost(t, d, "/internal/pool/"+name+"/restart")
	}
	testenv.WaitFor(t, 20*time.Second, "the model servers back", func() bool { return readyOfKind(t, d, "openai") == 2 })
	if code, inst, _, body := mixedPost(t, d, "/v1/chat/completions", nil, convBody("ms-small", "back?")); code != http.StatusOK ||
		!slices.Contains([]string{"ms-1", "ms-2"}, inst) {
		t.Errorf("ms-small after the restart: %d on %q: %s", code, inst, body)
	}
}

// A pool of several kinds whose accounts run binaries of their own, as a
// real one does (the simulate switch is off): each account is started with
// its own worker_bin and worker_args, and each model goes to its kind. The
// binaries here are the simulator behind a script; an agent CLI's accounts
// join such a pool the same way, with their CLI as the binary.
func TestMixedPoolOfOwnBinaries(t *testing.T) {
	bin := simworkerBin(t)
	accounts := []mixedAccount{
		{Name: "lm-1", Models: []string{"lm-coder"}, Args: []string{"--logged-in"}, Bin: bin},
		{Name: "ms-1", Driver: "openai", Models: []string{"ms-large"}, Bin: bin,
			BinArgs: []string{"start", "--protocol=openai", "--port={port}"}},
	}
	d, _ := startMixed(t, accounts, "")
	ins := instancesOf(t, d)
	for _, tt := range []struct{ model, kind, instance string }{{"lm-coder", "lingma", "lm-1"}, {"ms-large", "openai", "ms-1"}} {
		code, inst, _, body := mixedPost(t, d, "/v1/chat/completions", nil, convBody(tt.model, "hello"))
		if code != http.StatusOK || inst != tt.instance || ins[inst].Driver != tt.kind {
			t.Errorf("%s: %d on %q: %s; want %s, of kind %s", tt.model, code, inst, body, tt.instance, tt.kind)
		}
	}
	// Each process runs its account's own binary.
	for name, in := range ins {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", in.PID))
		if err != nil || !strings.Contains(string(cmdline), "simworker") {
			t.Errorf("%s runs %q (%v), want its worker_bin", name, cmdline, err)
		}
	}
}

// A kind whose accounts all fail to start (here the model servers' worker
// refuses its arguments) leaves the other kind serving. The failed kind
// never listed its models, so a name it might serve goes to its accounts
// and gets their 503, not a 404.
func TestMixedPoolOneKindFailed(t *testing.T) {
	accounts := mixedKinds()
	for i := range accounts {
		if accounts[i].Driver == "openai" {
			accounts[i].Args = []string{"--fail-rate=2"} // the simulator exits: --fail-rate=2: want 0..1
		}
	}
	path := filepath.Join(t.TempDir(), "poolgate.yaml")
	writeMixed(t, path, accounts, "backoff_max: 1s\n")
	d := daemontest.StartDaemonArgs(t, []string{"-config", path})
	testenv.WaitForNoError(t, 30*time.Second, "the model servers failed, the Lingma accounts ready", func() error {
		ins := instancesOf(t, d)
		for name, in := range ins {
			want := supervisor.StateReady
			if strings.HasPrefix(name, "ms-") {
				want = supervisor.StateFailed
			}
			if in.State != want {
				return fmt.Errorf("%s is %s", name, in.State)
			}
		}
		return nil
	})
	for _, model := range []string{"lm-coder", "lm-chat"} {
		if code, inst, _, body := mixedPost(t, d, "/v1/chat/completions", nil, convBody(model, "hello")); code != http.StatusOK ||
			!strings.HasPrefix(inst, "lm-") {
			t.Errorf("%s with the model servers failed: %d on %q: %s", model, code, inst, body)
		}
	}
	if code, _, _, body := mixedPost(t, d, "/v1/chat/completions", nil, convBody("ms-small", "anyone?")); code != http.StatusServiceUnavailable {
		t.Errorf("ms-small with its kind failed: %d %s, want 503", code, body)
	}
}
