package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/poolgate/poolgate/internal/openaiwire"
)

// maxBody caps an OpenAI request body (32 MiB).
const maxBody = 32 << 20

// oaiRequest is a chat completion request as the simulator reads it: the
// fields it uses are decoded as any OpenAI-compatible server would; other
// fields are ignored.
type oaiRequest = openaiwire.Request[openaiwire.Message]

// contentText flattens a message content: a string, null, or a list of parts
// of which the text parts count.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []openaiwire.Part
	_ = json.Unmarshal(raw, &parts) // anything else has no text
	var b strings.Builder
	for _, p := range parts {
		if p.Text != nil {
			b.WriteString(*p.Text)
		}
	}
	return b.String()
}

// sections maps the message list onto prompt-contract sections, so both
// protocols share one answer planner.
func sections(req *oaiRequest) []section {
	var out []section
	for _, m := range req.Messages {
		text := contentText(m.Content)
		switch m.Role {
		case "system", "developer":
			out = append(out, section{role: roleSystem, body: text})
		case "assistant":
			if text != "" || len(m.ToolCalls) == 0 {
				out = append(out, section{role: roleAssistant, body: text})
			}
			for _, tc := range m.ToolCalls {
				out = append(out, section{role: roleToolCall, body: tc.Function.Arguments,
					attrs: map[string]string{"id": tc.ID, "name": tc.Function.Name}})
			}
		case "tool":
			out = append(out, section{role: roleToolResult, body: text, attrs: map[string]string{"id": m.ToolCallID, "name": m.Name}})
		default:
			out = append(out, section{role: roleUser, body: text})
		}
	}
	// A JSON response format is the prompt's format section (the schema on
	// its last line), as the text workers are asked.
	if f := req.ResponseFormat; f != nil && (f.Type == "json_object" || f.Type == "json_schema") {
		body := "json"
		if f.JSONSchema != nil && len(f.JSONSchema.Schema) > 0 {
			body += "\n" + string(f.JSONSchema.Schema)
		}
		out = append([]section{{role: roleFormat, body: body}}, out...)
	}
	return out
}

// offeredTools returns the offered tools, or nil when there are none or the
// choice is "none".
func offeredTools(req *oaiRequest) *toolSpec {
	if len(req.Tools) == 0 {
		return nil
	}
	ts := &toolSpec{Choice: "auto"}
	var named struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(req.ToolChoice, &ts.Choice) != nil && json.Unmarshal(req.ToolChoice, &named) == nil {
		ts.Choice = named.Function.Name
	}
	if ts.Choice == "none" {
		return nil
	}
	for _, t := range req.Tools {
		var def toolDef
		if f := t.Function; f != nil {
			def = toolDef{Name: f.Name, Description: f.Description, Parameters: f.Parameters}
		}
		ts.Tools = append(ts.Tools, def)
	}
	return ts
}

func (s *Sim) serveModels(w http.ResponseWriter, _ *http.Request) {
	data := make([]map[string]any, 0, len(s.cfg.ModelKeys))
	for _, k := range s.cfg.ModelKeys {
		data = append(data, map[string]any{"id": k, "object": "model", "created": 1700000000, "owned_by": "simworker"})
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

func oaiError(w http.ResponseWriter, code int, typ, msg string) {
	writeJSON(w, code, map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": typ}})
}

// completion is one answer being written, stream or not.
type completion struct {
	id, model string
	created   int64
	text      string
	calls     []*toolCall
	callIDs   []string
	d         directives
	prompt    int // prompt tokens (words)
}

func (c *completion) usage() openaiwire.Usage {
	out := wordCount(c.text)
	if len(c.calls) > 0 {
		out = 0
		for _, call := range c.calls {
			out += wordCount(call.name) + len(call.args)
		}
	}
	return openaiwire.Usage{PromptTokens: c.prompt, CompletionTokens: out, TotalTokens: c.prompt + out}
}

func (c *completion) finishReason() string {
	if len(c.calls) > 0 {
		return "tool_calls"
	}
	return "stop"
}

func (s *Sim) serveCompletions(w http.ResponseWriter, r *http.Request) {
	var req oaiRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody)).Decode(&req); err != nil {
		oaiError(w, http.StatusBadRequest, "invalid_request_error", "invalid JSON body: "+err.Error())
		return
	}
	if len(req.Messages) == 0 {
		oaiError(w, http.StatusBadRequest, "invalid_request_error", "messages must not be empty")
		return
	}
	nth := s.asks.Add(1)
	secs := sections(&req)
	f := s.cfg.Faults
	d := directivesOf(s.cfg.Directives, secs).withDefaults(f)
	ctx := r.Context()
	if d.hang {
		<-ctx.Done()
		return
	}
	if sleepCtx(ctx, d.delay) != nil {
		return
	}
	if d.ratelimit || (f.RatelimitEvery > 0 && nth%int64(f.RatelimitEvery) == 0) {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(d.retryAfter.Seconds()))))
		oaiError(w, http.StatusTooManyRequests, "rate_limit_exceeded", "rate limited")
		return
	}
	if d.errAfter == 0 || (f.FailRate > 0 && rand.Float64() < f.FailRate) {
		oaiError(w, http.StatusInternalServerError, "server_error", "simulated error")
		return
	}
	c := s.newCompletion(&req, secs, d)
	if req.Stream != nil && *req.Stream {
		s.streamCompletion(w, r, c, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
		return
	}
	s.writeCompletion(w, r, c)
}

func (s *Sim) newCompletion(req *oaiRequest, secs []section, d directives) *completion {
	c := &completion{id: "chatcmpl-" + randomHex(12), model: req.Model, created: time.Now().Unix(), d: d}
	if c.model == "" {
		c.model = s.cfg.ModelKeys[0]
	}
	chars := 0
	for _, m := range req.Messages {
		text := contentText(m.Content)
		chars += len(text)
		c.prompt += wordCount(text)
	}
	if _, isJSON := promptFormat(secs); d.whoami && !isJSON {
		c.text = whoamiText("none", 1, false, len(req.Messages), chars)
		return c
	}
	p := planAnswer(secs, offeredTools(req), d.calls)
	c.text, c.calls = p.text, p.calls
	for range c.calls {
		c.callIDs = append(c.callIDs, "call_"+randomHex(12))
	}
	if len(c.calls) == 0 && d.words >= 0 {
		c.text = padWords(c.text, d.words)
	}
	return c
}

// writeCompletion answers a non-stream request. Chunk delays still apply, as
// the time a model would take to generate the deltas.
func (s *Sim) writeCompletion(w http.ResponseWriter, r *http.Request, c *completion) {
	chunks, full := splitChunks(c.text, c.d.chunks)
	c.text = full
	if n := len(chunks); n > 1 && sleepCtx(r.Context(), time.Duration(n-1)*c.d.chunkDelay) != nil {
		return
	}
	if c.d.crash {
		s.crashHTTP()
	}
	if c.d.errAfter > 0 {
		oaiError(w, http.StatusInternalServerError, "server_error", "simulated error")
		return
	}
	msg := openaiwire.CompletionMessage{Role: "assistant", Content: &c.text}
	if len(c.calls) > 0 {
		msg.Content, msg.ToolCalls = nil, make([]openaiwire.ToolCall, len(c.calls))
		for i, call := range c.calls {
			msg.ToolCalls[i] = openaiwire.ToolCall{ID: c.callIDs[i], Type: "function",
				Function: openaiwire.Function{Name: call.name, Arguments: marshalPlain(call.args)}}
		}
	}
	writeJSON(w, http.StatusOK, openaiwire.Completion{
		ID: c.id, Object: "chat.completion", Created: c.created, Model: c.model,
		Choices: []openaiwire.Choice{{Message: msg, FinishReason: c.finishReason()}},
		Usage:   c.usage(),
	})
}

// crashHTTP ends the process for [[sim:crash]]; under a test hook it aborts
// the response instead, which drops the connection.
func (s *Sim) crashHTTP() {
	s.log.Warn("sim crash: exiting mid-stream")
	s.cfg.Exit(3)
	panic(http.ErrAbortHandler)
}

// sseWriter writes OpenAI stream events, sending the headers with the first.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
}

func (e *sseWriter) data(v any) error {
	if !e.started {
		h := e.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		e.w.WriteHeader(http.StatusOK)
		e.started = true
	}
	payload := "[DONE]"
	if v != nil {
		payload = marshalPlain(v)
	}
	if _, err := fmt.Fprintf(e.w, "data: %s\n\n", payload); err != nil {
		return err
	}
	return e.rc.Flush()
}

// deltas are the stream's delta objects: text pieces, or per tool call its
// name followed by its arguments in two or more fragments.
func (c *completion) deltas() []map[string]any {
	if len(c.calls) == 0 {
		chunks, full := splitChunks(c.text, c.d.chunks)
		c.text = full
		out := make([]map[string]any, 0, len(chunks))
		for _, ch := range chunks {
			out = append(out, map[string]any{"content": ch})
		}
		return out
	}
	var out []map[string]any
	for i, call := range c.calls {
		head := openaiwire.ToolCallDelta{Index: &i, ID: c.callIDs[i], Type: "function", Function: openaiwire.FunctionDelta{Name: call.name}}
		out = append(out, map[string]any{"tool_calls": []openaiwire.ToolCallDelta{head}})
		for _, frag := range splitRunes(marshalPlain(call.args), max(2, c.d.chunks)) {
			tc := openaiwire.ToolCallDelta{Index: &i, Function: openaiwire.FunctionDelta{Arguments: frag}}
			out = append(out, map[string]any{"tool_calls": []openaiwire.ToolCallDelta{tc}})
		}
	}
	return out
}

func (s *Sim) streamCompletion(w http.ResponseWriter, r *http.Request, c *completion, includeUsage bool) {
	ctx := r.Context()
	e := &sseWriter{w: w, rc: http.NewResponseController(w)}
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": c.id, "object": "chat.completion.chunk", "created": c.created, "model": c.model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	deltas := c.deltas()
	if len(deltas) == 0 {
		deltas = []map[string]any{{"content": ""}}
	}
	for i, delta := range deltas {
		if i == c.d.errAfter {
			_ = e.data(map[string]any{"error": map[string]any{"message": "simulated error", "type": "server_error", "code": "server_error"}})
			return
		}
		if i > 0 && sleepCtx(ctx, c.d.chunkDelay) != nil {
			return
		}
		if i == 0 {
			delta["role"] = "assistant"
		}
		if e.data(chunk(delta, nil)) != nil {
			return
		}
		if c.d.crash {
			s.crashHTTP()
		}
	}
	if c.d.errAfter >= 0 {
		_ = e.data(map[string]any{"error": map[string]any{"message": "simulated error", "type": "server_error", "code": "server_error"}})
		return
	}
	if e.data(chunk(map[string]any{}, c.finishReason())) != nil {
		return
	}
	if includeUsage {
		_ = e.data(map[string]any{"id": c.id, "object": "chat.completion.chunk", "created": c.created, "model": c.model,
			"choices": []any{}, "usage": c.usage()})
	}
	_ = e.data(nil)
}

// splitRunes cuts s into at most n non-empty pieces on rune boundaries.
func splitRunes(s string, n int) []string {
	rs := []rune(s)
	n = min(n, len(rs))
	out := make([]string, 0, n)
	for i := range n {
		out = append(out, string(rs[i*len(rs)/n:(i+1)*len(rs)/n]))
	}
	return out
}
